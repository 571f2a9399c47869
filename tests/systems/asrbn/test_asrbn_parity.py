"""Parity with SA-toolkit's own code (the test-only reference, transcribed from its module tree) on random
weights and real speech (the demo corpus): a faithful ``final.pt`` is written from the reference networks,
imported by ``voxanon models import sa-toolkit``, and our modules' BN features and converted waveforms are
compared with the reference's."""
from __future__ import annotations

import numpy as np
import pytest
import soundfile
import torch

from tests.reference import sa_toolkit as ref
from tests.helpers.sa_toolkit_fixtures import SPEAKERS, reference_asr, reference_converter, write_asr_release, \
    write_converter_release
from voxanon.data_prep.corpus import read_data_dir
from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.models.nets.asrbn.bottleneck import kaldi_fbank
from voxanon.models.nets.asrbn.core_hifigan import CoreHifiGan, conditioning
from voxanon.models.nets.hifigan import GeneratorConfig
from voxanon.models.checkpoints.registry import load_model_set
from voxanon.models.checkpoints.sa_toolkit import load_converter, load_extractor
from voxanon.models.f0.sa_yaapt import sa_toolkit_f0
from voxanon.pipeline.cli import main

BN_TOLERANCE = 1e-4
MIN_SNR_DB = 40.0


@pytest.fixture(scope="module")
def speech():
    """Two demo utterances (a female and a male voice) and a 12 s concatenation (several synthesis windows)."""
    demo = read_data_dir(demo_corpus_dir())
    waves = [soundfile.read(demo.audio_path(sorted(demo.spk2utt[speaker])[0]), dtype="float32")[0]
             for speaker in ("slt", "awb")]
    long = np.concatenate([soundfile.read(demo.audio_path(utt), dtype="float32")[0]
                           for utt in sorted(demo.spk2utt["us2"])[:5]])[:12 * 16000]
    return waves + [long]


def relative_error(ours: np.ndarray, theirs: torch.Tensor) -> float:
    theirs = theirs.detach().numpy()
    return float(np.linalg.norm(ours - theirs) / np.linalg.norm(theirs))


def snr_db(ours: np.ndarray, theirs: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(theirs ** 2) / max(np.sum((ours - theirs) ** 2), 1e-30)))


def installed(tmp_path, monkeypatch, path, name):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    assert main(["models", "import", "sa-toolkit", str(path), "--name", name]) == 0
    return load_model_set(name)


@pytest.mark.parametrize("front_end,vq", [("wav2vec2", True), ("fbank", True), ("fbank", False)])
def test_bn_features_match_sa_toolkit(front_end, vq, speech, tmp_path, monkeypatch, one_torch_thread):
    path = write_asr_release(tmp_path / "release", front_end, vq)
    extractor = load_extractor(installed(tmp_path, monkeypatch, path, "asr"))
    reference = reference_asr(front_end, vq)
    for wave in speech[:2]:
        with torch.inference_mode():
            theirs = reference.extract_bn(torch.from_numpy(wave)[None].clone())[0]
            ours = extractor.extract([wave])[0]
        assert ours.shape == tuple(theirs.shape)
        assert relative_error(ours, theirs) <= BN_TOLERANCE
        if vq:  # the same codebook rows, frame by frame
            codebook = extractor.tdnnfs[str(2 * (len(extractor.config.context) - 2))].tdnn.bottleneck_func.quant
            with torch.inference_mode():
                codes = codebook.codes(torch.from_numpy(ours))
                assert torch.equal(codes, codebook.codes(theirs))
            assert len(torch.unique(codes)) >= 4  # the quantiser is exercised


def test_batched_bn_features_equal_one_at_a_time(speech, tmp_path, monkeypatch, one_torch_thread):
    """The padded, masked batch (the GPU code path, run on the CPU) gives each utterance its own features."""
    extractor = load_extractor(installed(tmp_path, monkeypatch, write_asr_release(tmp_path / "r", "wav2vec2"), "a"))
    waves = [speech[0], speech[1][:20000], speech[0][5000:]]
    for alone, batched in zip(extractor.extract(waves), extractor.extract_batch(waves)):
        assert alone.shape == batched.shape and np.abs(alone - batched).max() <= 1e-5 * np.abs(alone).max()


def test_filterbanks_match_satools_kaldifeat(speech):
    wave = torch.from_numpy(speech[1])
    theirs = ref.fbank(wave[None] * 32768, num_mel_bins=80, snip_edges=False)[0]
    ours = kaldi_fbank(wave, 80)
    assert ours.shape == theirs.shape == ((len(wave) + 80) // 160, 80)
    assert float((ours - theirs).abs().max()) <= 1e-4
    # Digital silence: the log floor is satools' 1e-6, not float32 epsilon (torchaudio's Kaldi compliance).
    silence = torch.zeros(4000)
    assert torch.allclose(kaldi_fbank(silence, 80), ref.fbank(silence[None], num_mel_bins=80, snip_edges=False)[0])


@pytest.mark.parametrize("front_end", ["wav2vec2", "fbank"])
def test_converted_speech_matches_sa_toolkit(front_end, speech, tmp_path, monkeypatch, one_torch_thread):
    path = write_converter_release(tmp_path / "release", front_end)
    model_set = installed(tmp_path, monkeypatch, path, "converter")
    extractor, (vocoder, speakers) = load_extractor(model_set), load_converter(model_set)
    assert speakers == sorted(SPEAKERS)
    reference, _, _ = reference_converter(front_end)
    waves = speech if front_end == "wav2vec2" else speech[:2]
    targets = ["6081", "19", "911"]
    f0s = sa_toolkit_f0(waves)
    items = [conditioning(bn, f0, speakers.index(target), len(speakers))
             for bn, f0, target in zip(extractor.extract(waves), f0s, targets)]
    ours = vocoder.synthesise(items)
    for wave, f0, target, converted in zip(waves, f0s, targets, ours):
        reference.set_f0(torch.from_numpy(f0)[None])
        with torch.inference_mode():
            theirs = reference.convert(torch.from_numpy(wave)[None], target=[target])[0].numpy()
        assert converted.shape == theirs.shape  # 320 samples per BN frame, and the reflected one
        assert snr_db(converted, theirs) >= MIN_SNR_DB
    # The padded, length-masked batch (the GPU code path on the CPU) gives the same waveforms.
    for alone, batched in zip(ours, vocoder.synthesise_padded(items)):
        assert snr_db(batched, alone) >= 60.0


def test_core_hifigan_output_layer_reflects_one_sample():
    """Against the reference CoreHifiGan on the same (folded) weights, whole utterances and windowed ones."""
    from voxanon.models.checkpoints.safe import fold_weight_norm

    torch.manual_seed(3)
    theirs = ref.CoreHifiGan(imput_dim=20, upsample_initial_channel=32).eval()
    ours = CoreHifiGan(GeneratorConfig(in_channels=20, upsample_rates=(5, 4, 4, 2, 2),
                                       upsample_kernel_sizes=(11, 8, 8, 4, 4), upsample_initial_channel=32))
    ours.load_state_dict(fold_weight_norm(theirs.state_dict()))
    frames = torch.randn(1, 20, 37)
    with torch.inference_mode():
        expected = theirs(frames)[0]
        assert expected.shape == (1, 1, 37 * 320 + 1)
        assert torch.allclose(ours.eval()(frames), expected, atol=1e-6)


@pytest.mark.slow
def test_full_size_b5_and_b6_match_sa_toolkit(speech, tmp_path, monkeypatch):
    """The published sizes (wav2vec2 large, 1024-wide TDNN-F, CoreHifiGan at 512 channels, 247 targets) on
    random weights, one utterance each: BN within 1e-4 relative, waveform SNR >= 40 dB."""
    from types import SimpleNamespace

    import sa_toolkit_fixtures as fixtures

    for front_end in ("wav2vec2", "fbank"):
        torch.manual_seed(0)
        asr = ref.build_asr(ref.asr_args(48), front_end, True)(output_dim=3280).eval()
        fixtures._codebook_from_speech(asr, 0)
        utt2spk = {f"{1000 + i}_000": str(1000 + i) for i in range(247)}
        args = SimpleNamespace(asrbn_model="bn_tdnnf/final.pt", f0_transformation="")
        reference = ref.build_hifigan(args)(utt2spk, asr).eval()
        folder = tmp_path / front_end
        folder.mkdir()
        ref.save_final_pt(folder / "final.pt", reference, base_model_path="local/tuning/hifigan.py",
                          base_model_params={"utt2spk": utt2spk}, base_model_args=vars(args),
                          task_path="/egs/vc/libritts")
        model_set = installed(tmp_path / front_end, monkeypatch, folder / "final.pt", "full")
        extractor, (vocoder, speakers) = load_extractor(model_set), load_converter(model_set)
        wave = speech[0]
        f0 = sa_toolkit_f0(wave)
        ours_bn = extractor.extract([wave])[0]
        converted = vocoder.synthesise([conditioning(ours_bn, f0, speakers.index("1100"), len(speakers))])[0]
        reference.set_f0(torch.from_numpy(f0)[None])
        with torch.inference_mode():
            theirs_bn = asr.extract_bn(torch.from_numpy(wave)[None].clone())[0]
            theirs = reference.convert(torch.from_numpy(wave)[None], target=["1100"])[0].numpy()
        assert relative_error(ours_bn, theirs_bn) <= BN_TOLERANCE
        assert snr_db(converted, theirs) >= MIN_SNR_DB
