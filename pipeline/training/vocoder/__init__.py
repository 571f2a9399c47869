"""HiFi-GAN vocoder training for SSL-SAS-layout model sets (``voxanon train vocoder``)."""
