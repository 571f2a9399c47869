"""Model directories: YAML read as data, known layouts in our modules (parity with speechbrain), code refused."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from tests.helpers.speechbrain_layouts import ASR_HPARAMS, write_asr_dir
from voxanon.data_prep.errors import VoxanonError
from voxanon.models.recognisers.asr import SpeechBrainASR, Wav2Vec2CTCASR, load_asr
from voxanon.models.checkpoints.speechbrain_dirs import (Tagged, UnsafeModelCodeError, check_model_code,
                                                         disallowed_tags, read_hparams, wav2vec2_config_from_state)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SIGNALS = [0.3 * np.sin(2 * np.pi * f * np.arange(n) / 16000).astype(np.float32) + 0.05 * np.cos(
    2 * np.pi * 2.7 * f * np.arange(n) / 16000).astype(np.float32) for f, n in ((220, 16000), (530, 11000),
                                                                             (1200, 7000))]

TOUCHED = "never-run-{}"


def os_system_yaml(marker) -> str:
    return f'hacked: !apply:os.system ["touch {marker}"]\n'


def test_reader_keeps_tags_as_data_and_runs_nothing(tmp_path):
    marker = tmp_path / TOUCHED.format("reader")
    path = tmp_path / "hyperparams.yaml"
    path.write_text(os_system_yaml(marker) + "size: 3\nlayer: !new:torch.nn.Linear\n    in_features: !ref <size>\n")
    hparams = read_hparams(path)
    assert hparams["hacked"] == Tagged("!apply:os.system", [f"touch {marker}"])
    assert hparams["layer"].target == "torch.nn.Linear"
    assert disallowed_tags(path.read_text()) == ["!apply:os.system"]
    with pytest.raises(UnsafeModelCodeError, match=r"hyperparams.yaml: refers to code .*!apply:os.system"
                                                   r".*--trust-model-code"):
        check_model_code(tmp_path, trust_model_code=False)
    assert check_model_code(tmp_path, trust_model_code=True)["size"] == 3
    assert not marker.exists()


@pytest.mark.parametrize("tag", ["!name:speechbrain.utils.superpowers.run_shell", "!module:os",
                                 "!apply:speechbrain.nnet.linear.Linear", "!new:builtins.eval",
                                 "!include:other.yaml",
                                 # Allowed prefixes, but reaching what those modules import:
                                 "!new:torch.nn.functional.torch.hub.subprocess.Popen",
                                 "!name:speechbrain.nnet.linear.logging.root.manager.__class__",
                                 "!new:speechbrain.dataio.encoder.os.system",
                                 "!new:speechbrain.nnet.no_such_module.Thing"])
def test_allow_list_refuses_code_outside_it(tmp_path, tag):
    (tmp_path / "hyperparams.yaml").write_text(f"x: {tag} []\nok: !new:speechbrain.nnet.linear.Linear\n")
    with pytest.raises(UnsafeModelCodeError, match=re.escape(tag)):
        check_model_code(tmp_path, trust_model_code=False)


@pytest.mark.parametrize("hidden", [
    "x: !apply:os.system [a]\nx: 1\n",                      # a duplicate key a constructor would drop
    "base: &b {cmd: !apply:os.system [a]}\nother:\n  <<: *b\n",  # behind an anchor and a merge
    "%TAG !e! !apply:\n---\nx: !e!os.system [a]\n",         # a tag handle spelling the prefix
    "x: !<!apply:os.system> [a]\n",                        # a verbatim tag
])
def test_tags_are_found_however_they_are_written(hidden):
    assert disallowed_tags(hidden) == ["!apply:os.system"]


def test_generic_encoder_asr_with_os_system_is_refused_and_never_runs(tmp_path):
    model = tmp_path / "evil"
    model.mkdir()
    marker = tmp_path / TOUCHED.format("asr")
    (model / "hyperparams.yaml").write_text(os_system_yaml(marker) + "modules: {}\n")
    with pytest.raises(VoxanonError, match="--trust-model-code"):
        load_asr(model)
    with pytest.raises(VoxanonError, match="--trust-model-code"):
        SpeechBrainASR(model)
    assert not marker.exists()


def test_known_asr_layout_never_evaluates_its_yaml(tmp_path):
    marker = tmp_path / TOUCHED.format("known")
    # The known layout plus a hostile entry: loading it into our modules must not run the entry.
    model = write_asr_dir(tmp_path / "asr", hparams=ASR_HPARAMS + os_system_yaml(marker))
    asr = load_asr(model)
    assert isinstance(asr, Wav2Vec2CTCASR)
    asr.transcribe_many(SIGNALS[:1])
    assert not marker.exists()


@pytest.fixture(scope="module", params=["sequential", "vanilla", "ctc-text-encoder"])
def asr_dir(tmp_path_factory, request):
    from tests.helpers.speechbrain_layouts import ASR_HPARAMS_CTC_TEXT, ASR_HPARAMS_VANILLA

    hparams = {"sequential": ASR_HPARAMS, "vanilla": ASR_HPARAMS_VANILLA,
               "ctc-text-encoder": ASR_HPARAMS_CTC_TEXT}[request.param]
    return write_asr_dir(tmp_path_factory.mktemp("sb") / "asr-wav2vec2-librispeech",
                         vanilla=request.param == "vanilla", hparams=hparams)


def test_wav2vec2_ctc_matches_speechbrain_encoder_asr(asr_dir):
    from speechbrain.inference.ASR import EncoderASR

    ours = load_asr(asr_dir)
    assert isinstance(ours, Wav2Vec2CTCASR)
    # The reference: speechbrain evaluates the YAML the test wrote itself.
    reference = EncoderASR.from_hparams(source=str(asr_dir), savedir=None)
    published = torch.load(asr_dir / "wav2vec2.ckpt")
    assert set(reference.mods.encoder.wav2vec2.state_dict()) == set(published)
    assert set(torch.nn.ModuleList([reference.mods.encoder.enc, reference.mods.encoder.ctc_lin]).state_dict()) \
        == set(torch.load(asr_dir / "asr.ckpt"))
    # The reference on each utterance alone: speechbrain's padded batches normalise over the padding too.
    with torch.inference_mode():
        for signal in SIGNALS:
            wav = torch.from_numpy(signal)[None]
            expected = reference.encode_batch(wav, torch.ones(1))
            got = ours._model(wav)
            assert got.shape == expected.shape
            assert torch.allclose(got, expected, atol=1e-5), float((got - expected).abs().max())
    expected_words = [reference.transcribe_batch(torch.from_numpy(s)[None], torch.ones(1))[0][0].strip()
                      for s in SIGNALS]
    assert ours.transcribe_many(SIGNALS) == expected_words
    assert any(expected_words)


def test_wav2vec2_config_read_off_the_weights_when_no_source_is_at_hand(asr_dir):
    from tests.helpers.speechbrain_layouts import tiny_wav2vec2_config

    state = {k[len("model."):]: v for k, v in torch.load(asr_dir / "wav2vec2.ckpt").items()}
    inferred = wav2vec2_config_from_state(state)
    reference = tiny_wav2vec2_config(large_style=True)
    for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "conv_dim",
                 "conv_kernel", "conv_bias",
                 "feat_extract_norm", "do_stable_layer_norm", "num_conv_pos_embeddings",
                 "num_conv_pos_embedding_groups"):
        assert list(np.atleast_1d(getattr(inferred, name))) == list(np.atleast_1d(getattr(reference, name))), name


def test_asr_without_its_wav2vec2_source_reads_the_configuration_off_the_weights(tmp_path, asr_dir):
    import shutil

    offline = tmp_path / "offline"
    shutil.copytree(asr_dir, offline)
    text = (offline / "hyperparams.yaml").read_text()
    hub = text.split("wav2vec2_hub: ", 1)[1].split("\n", 1)[0]
    (offline / "hyperparams.yaml").write_text(text.replace(hub, "facebook/no-such-model-in-any-cache"))
    wavs = torch.from_numpy(SIGNALS[0])[None]
    with torch.inference_mode():
        inferred = load_asr(offline)._model(wavs, torch.ones(1))
        configured = load_asr(asr_dir)._model(wavs, torch.ones(1))
    assert torch.allclose(inferred, configured, atol=1e-6)


def test_asr_dir_missing_a_file_names_it(tmp_path):
    model = write_asr_dir(tmp_path / "asr")
    (model / "asr.ckpt").unlink()
    with pytest.raises(VoxanonError, match=r"asr\.ckpt: missing"):
        load_asr(model)


def test_published_style_yamls_are_on_the_allow_list(tmp_path):
    from tests.helpers.speechbrain_layouts import ASR_HPARAMS_VANILLA, SER_HPARAMS

    for name, text in (("asr", ASR_HPARAMS), ("vanilla", ASR_HPARAMS_VANILLA), ("ser", SER_HPARAMS)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(text.format(hub="h", save="s", n_tokens=5, pretrained="p"))
        assert disallowed_tags(path.read_text()) == [], name


def test_nonstandard_feature_extractor_without_config_is_a_clear_error():
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    from voxanon.models.checkpoints.speechbrain_dirs import ModelDirError

    small = Wav2Vec2Model(Wav2Vec2Config(hidden_size=64, num_hidden_layers=1, num_attention_heads=1,
                                         intermediate_size=8, conv_dim=[8, 8], conv_kernel=[4, 2],
                                         conv_stride=[4, 2], num_conv_pos_embeddings=4,
                                         num_conv_pos_embedding_groups=1))
    with pytest.raises(ModelDirError, match="2-layer feature extractor: its strides cannot be read"):
        wav2vec2_config_from_state(small.state_dict())


def test_trust_model_code_flag_reaches_the_asr_loader(tmp_path):
    from tests.helpers.asr_dirs import write_tiny_encoder_asr
    from voxanon.pipeline.evaluation.computations import make_transcriber

    model = write_tiny_encoder_asr(tmp_path / "custom", favoured_label="B")
    with open(model / "hyperparams.yaml", "a") as handle:
        handle.write("extra: !new:collections.OrderedDict\n")  # harmless, but not on the allow-list
    wave = [0.1 * np.ones(8000, dtype=np.float32)]
    with pytest.raises(UnsafeModelCodeError, match="collections.OrderedDict"):
        make_transcriber(str(model)).compute(wave)
    assert make_transcriber(str(model), trust_model_code=True).compute(wave) == ["B"]
