"""Test-only reference for B3, transcribed (not imported): the IMS-Toucan modules the VoicePrivacy 2024 recipe
vendors under ``anonymization/modules/sttts/tts/IMSToucan/`` (DigitalPhonetics/IMS-Toucan, Apache-2.0,
Copyright the IMS Toucan authors), with only training-time and logging code left out."""
