"""B3's phone recogniser's published file, ``asr/asr_branchformer_tts-phn_en.zip``, read as data.

The file is an ESPnet model-zoo zip as ``espnet_model_zoo`` packs a model: ``meta.yaml`` names the training
config (``yaml_files.asr_train_config``) and the model (``files.asr_model_file``); the config's
``normalize_conf.stats_file`` and, for sentencepiece tokens, ``bpemodel`` are packed beside them under the same
relative paths. :func:`read_asr` reads the two YAML files with ``yaml.safe_load``, the ``.pth`` (a plain state
dict) with ``torch.load(weights_only=True)`` (a ``__reduce__`` payload is refused before anything runs), the
statistics with ``numpy.load(allow_pickle=False)``; it never unpacks the zip. :func:`convert_asr` checks the
config names the networks :mod:`voxanon.models.nets.tts.recogniser` implements (default front end, global MVN,
Branchformer encoder, Transformer decoder, CTC) and the state dict key by key against them.
"""
from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path, PurePosixPath

import numpy as np
import torch
import yaml

from ...data_prep.errors import VoxanonError
from ..nets.tts.recogniser import Recogniser, RecogniserConfig, build_recogniser
from .safe import CheckpointError, UnsafeCheckpointError, check_state_builds

RELEASE_FILE = "asr/asr_branchformer_tts-phn_en.zip"
"""Where the recipe's models_dir (``exp/sttts_models``) keeps the zip."""
BEAM_SIZE = 15
CTC_WEIGHT = 0.2
"""``ims_asr.py``'s decoding settings (``configs/anon_sttts.yaml``: ctc_weight 0.2; beam 15 in the code)."""
UTT_START_TOKEN, UTT_END_TOKEN = "~", "~#"
"""``configs/anon_sttts.yaml``'s ``utt_start_token`` / ``utt_end_token``."""

SUPPORTED = {"frontend": "default", "normalize": "global_mvn", "encoder": "branchformer", "decoder": "transformer"}
ENCODER_SETTINGS = {"use_attn": True, "attention_layer_type": "rel_selfattn", "pos_enc_layer_type": "rel_pos",
                    "rel_pos_type": "latest", "use_cgmlp": True, "use_linear_after_conv": False,
                    "gate_activation": "identity", "merge_method": "concat", "input_layer": "conv2d"}
"""The Branchformer variant the recogniser implements (the published config's); any other is refused."""
TOKEN_TYPES = ("bpe", "char", "phn")
SIZES = {
    "full": dict(output_size=512, attention_heads=8, cgmlp_linear_units=3072, cgmlp_conv_kernel=31, num_blocks=18,
                 decoder_attention_heads=8, decoder_linear_units=2048, decoder_num_blocks=6, n_tokens=100),
    "tiny": dict(output_size=32, attention_heads=4, cgmlp_linear_units=64, cgmlp_conv_kernel=7, num_blocks=2,
                 decoder_attention_heads=4, decoder_linear_units=64, decoder_num_blocks=2, n_tokens=40),
}
"""Random model sizes: ``full`` has the published shapes (its token count is a placeholder: the release's own
list decides), ``tiny`` is for fast tests (more tokens than the pre-beam's 22, as in the release)."""


def _member(archive: zipfile.ZipFile, name: str, path: Path, what: str) -> bytes:
    name = str(PurePosixPath(name))
    try:
        return archive.read(name)
    except KeyError:
        raise CheckpointError(f"{path}: the ESPnet zip has no {name} ({what})") from None


def _yaml(data: bytes, path: Path, name: str) -> dict:
    try:
        loaded = yaml.safe_load(data.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: {name} is not readable YAML ({error})") from None
    if not isinstance(loaded, dict):
        raise CheckpointError(f"{path}: {name} is not a YAML mapping")
    return loaded


def load_state_bytes(data: bytes, path: Path, name: str) -> dict:
    """A ``torch.save``d state dict from bytes, as data only: anything but tensors and containers is refused."""
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise UnsafeCheckpointError(f"{path}: {name} holds more than tensors and is refused unread "
                                    f"({str(error).splitlines()[0]})") from None
    except Exception as error:
        raise CheckpointError(f"{path}: {name} is not a readable PyTorch file ({type(error).__name__}: {error})") from None
    if not isinstance(state, dict) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        raise CheckpointError(f"{path}: {name} is not a state dict of tensors")
    return state


def read_asr(path: Path) -> dict:
    """The zip's meta, training config, state dict, feature statistics and (for bpe tokens) sentencepiece model
    bytes, read as data."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file not found: {path}")
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise CheckpointError(f"{path}: not a zip file (expected ESPnet's packed model)") from None
    with archive:
        meta = _yaml(_member(archive, "meta.yaml", path, "the model-zoo index"), path, "meta.yaml")
        try:
            config_name = meta["yaml_files"]["asr_train_config"]
            model_name = meta["files"]["asr_model_file"]
        except (KeyError, TypeError):
            raise CheckpointError(f"{path}: meta.yaml lacks yaml_files.asr_train_config or files.asr_model_file") from None
        config = _yaml(_member(archive, config_name, path, "the training config"), path, config_name)
        state = load_state_bytes(_member(archive, model_name, path, "the model"), path, model_name)
        stats_name = (config.get("normalize_conf") or {}).get("stats_file")
        stats = None
        if stats_name:
            with np.load(io.BytesIO(_member(archive, stats_name, path, "the feature statistics")),
                         allow_pickle=False) as npz:
                stats = {key: npz[key] for key in npz.files}
        bpe_model = None
        if config.get("token_type") == "bpe" and config.get("bpemodel"):
            bpe_model = _member(archive, config["bpemodel"], path, "the sentencepiece model")
    return {"meta": meta, "config": config, "config_name": config_name, "model_name": model_name, "state": state,
            "stats": stats, "bpe_model": bpe_model}


def _require(config: dict, key: str, expected, path: Path, where: str) -> None:
    if config.get(key, expected) != expected:
        raise CheckpointError(f"{path}: {where}{key} is {config.get(key)!r}; B3's recogniser implements {expected!r}")


def recogniser_config(train_config: dict, path: Path) -> RecogniserConfig:
    """The recogniser's settings from ESPnet's training config, refusing variants it does not implement."""
    for key, expected in SUPPORTED.items():
        if train_config.get(key) != expected:
            raise CheckpointError(f"{path}: config.yaml's {key} is {train_config.get(key)!r}; B3's recogniser "
                                  f"implements {expected!r}")
    encoder = train_config.get("encoder_conf") or {}
    for key, expected in ENCODER_SETTINGS.items():
        _require(encoder, key, expected, path, "encoder_conf.")
    frontend = train_config.get("frontend_conf") or {}
    for key, expected in (("window", "hann"), ("center", True), ("normalized", False), ("onesided", True),
                          ("fmin", None), ("fmax", None), ("htk", False), ("apply_stft", True)):
        _require(frontend, key, expected, path, "frontend_conf.")
    normalize = train_config.get("normalize_conf") or {}
    for key in ("norm_means", "norm_vars"):
        _require(normalize, key, True, path, "normalize_conf.")
    decoder = train_config.get("decoder_conf") or {}
    _require(decoder, "input_layer", "embed", path, "decoder_conf.")
    _require(decoder, "normalize_before", True, path, "decoder_conf.")
    _require(decoder, "concat_after", False, path, "decoder_conf.")
    _require(train_config.get("model_conf") or {}, "sym_blank", "<blank>", path, "model_conf.")
    token_type = train_config.get("token_type")
    if token_type not in TOKEN_TYPES:
        raise CheckpointError(f"{path}: config.yaml's token_type is {token_type!r}; expected one of {TOKEN_TYPES}")
    tokens = train_config.get("token_list")
    if not isinstance(tokens, list) or len(tokens) < 3 or not all(isinstance(token, str) for token in tokens):
        raise CheckpointError(f"{path}: config.yaml's token_list is not a list of token strings")
    if tokens[0] != "<blank>" or tokens[-1] != "<sos/eos>":
        raise CheckpointError(f"{path}: config.yaml's token_list must start with <blank> and end with <sos/eos> "
                              "(ESPnet's blank id 0 and sos/eos id len-1)")
    n_fft = int(frontend.get("n_fft", 512))
    sample_rate = frontend.get("fs", 16000)
    if sample_rate not in (16000, "16k"):
        raise CheckpointError(f"{path}: frontend_conf.fs is {sample_rate!r}; B3's recogniser reads 16 kHz")
    return RecogniserConfig(
        token_list=tuple(tokens), token_type=token_type, n_fft=n_fft,
        win_length=int(frontend.get("win_length") or n_fft), hop_length=int(frontend.get("hop_length", 128)),
        n_mels=int(frontend.get("n_mels", 80)), output_size=int(encoder.get("output_size", 256)),
        attention_heads=int(encoder.get("attention_heads", 4)),
        cgmlp_linear_units=int(encoder.get("cgmlp_linear_units", 2048)),
        cgmlp_conv_kernel=int(encoder.get("cgmlp_conv_kernel", 31)), num_blocks=int(encoder.get("num_blocks", 12)),
        decoder_attention_heads=int(decoder.get("attention_heads", 4)),
        decoder_linear_units=int(decoder.get("linear_units", 2048)),
        decoder_num_blocks=int(decoder.get("num_blocks", 6)), beam_size=BEAM_SIZE, ctc_weight=CTC_WEIGHT,
        utt_start_token=UTT_START_TOKEN, utt_end_token=UTT_END_TOKEN)


def convert_asr(checkpoint: dict, path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(state dict with the recogniser's keys, JSON-able config) from :func:`read_asr`'s result, checked key by
    key: a missing, unexpected or mis-shaped key is refused naming it and the file."""
    path = Path(path)
    config = recogniser_config(checkpoint["config"], path)
    if config.token_type == "bpe" and checkpoint.get("bpe_model") is None:
        raise CheckpointError(f"{path}: token_type bpe without a bpemodel: ESPnet would return no text")
    if config.output_size % config.attention_heads or config.output_size % config.decoder_attention_heads:
        raise CheckpointError(f"{path}: output_size {config.output_size} is not divisible by the attention heads")
    state = dict(checkpoint["state"])
    check_state_builds(lambda: build_recogniser(config), state,
                       "not the Branchformer recogniser its config.yaml describes",
                       f"{path} ({checkpoint.get('model_name', 'model')})")
    return {key: value.contiguous() for key, value in state.items()}, config.to_dict()


def build_asr(config: dict) -> Recogniser:
    return build_recogniser(config)


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    hz = np.asanyarray(hz, dtype=np.float64)
    mels = hz / (200.0 / 3)
    log_region = hz >= 1000.0
    mels[log_region] = 15.0 + np.log(hz[log_region] / 1000.0) / (np.log(6.4) / 27.0)
    return mels


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    hz = (200.0 / 3) * mels
    log_region = mels >= 15.0
    hz[log_region] = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mels[log_region] - 15.0))
    return hz


def mel_matrix(config: RecogniserConfig) -> torch.Tensor:
    """ESPnet's ``LogMel`` buffer for random weights: librosa's ``filters.mel`` (Slaney scale and area
    normalisation, 0 Hz to Nyquist, float32), transposed. A release's own buffer is used as it is."""
    n_freq = config.n_fft // 2 + 1
    frequencies = np.fft.rfftfreq(n=config.n_fft, d=1.0 / config.sample_rate)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(np.array([0.0]))[0], _hz_to_mel(np.array([config.sample_rate / 2]))[0],
                                   config.n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, frequencies)
    weights = np.zeros((config.n_mels, n_freq), dtype=np.float32)
    for i in range(config.n_mels):
        weights[i] = np.maximum(0, np.minimum(-ramps[i] / fdiff[i], ramps[i + 2] / fdiff[i + 1]))
    weights *= (2.0 / (mel_f[2:config.n_mels + 2] - mel_f[:config.n_mels]))[:, np.newaxis]
    return torch.from_numpy(weights.T).float()


def random_stats(n_mels: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Feature statistics as ESPnet's ``collect_stats`` writes them (count, sum, sum_square over frames)."""
    count = np.array(1000 + int(rng.integers(0, 1000)))
    frames = rng.normal(-8.0, 3.0, size=(int(count), n_mels))
    return {"count": count, "sum": frames.sum(0), "sum_square": (frames ** 2).sum(0)}


def normaliser_buffers(stats: dict[str, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """ESPnet's ``GlobalMVN`` mean and std from the statistics (float64, variance floored at 1e-20)."""
    mean = stats["sum"] / stats["count"]
    var = stats["sum_square"] / stats["count"] - mean * mean
    return torch.from_numpy(mean), torch.from_numpy(np.sqrt(np.maximum(var, 1.0e-20)))


def random_token_list(n_tokens: int) -> list[str]:
    """An ESPnet bpe token list: <blank>, <unk>, sentencepiece pieces of IPA, <sos/eos>."""
    letters = list(dict.fromkeys("ðθʃʒŋæɑɔəɛɪʊʌˈˌː,.?!abcdefghijklmnopqrstuvwxyz"))
    pieces = ["\u2581"] + [("\u2581" if index % 3 == 0 else "") + letter for index, letter in enumerate(letters)]
    return ["<blank>", "<unk>", *pieces[:n_tokens - 3], "<sos/eos>"]


def random_asr(size: str = "full", seed: int = 0) -> tuple[dict[str, torch.Tensor], dict]:
    """Random weights: ``full`` has the published shapes, ``tiny`` is small for fast tests. Every draw comes
    from a generator seeded with ``seed``."""
    if size not in SIZES:
        raise VoxanonError(f"model size must be 'full' or 'tiny', got {size!r}")
    sizes = dict(SIZES[size])
    config = RecogniserConfig(token_list=tuple(random_token_list(sizes.pop("n_tokens"))), beam_size=BEAM_SIZE,
                              ctc_weight=CTC_WEIGHT, utt_start_token=UTT_START_TOKEN, utt_end_token=UTT_END_TOKEN,
                              **sizes)
    generator = torch.Generator().manual_seed(seed)
    model = build_recogniser(config)
    norms = {name for name, module in model.named_modules() if isinstance(module, torch.nn.LayerNorm)}
    state = {}
    for key, tensor in model.state_dict().items():
        owner, _, leaf = key.rpartition(".")
        if owner in norms and leaf == "weight":
            state[key] = 1.0 + 0.1 * torch.randn(tensor.shape, generator=generator)
        elif leaf == "weight" and tensor.ndim >= 2:
            state[key] = torch.randn(tensor.shape, generator=generator) / tensor[0].numel() ** 0.5
        else:
            state[key] = 0.1 * torch.randn(tensor.shape, generator=generator)
    state["frontend.logmel.melmat"] = mel_matrix(config)
    stats = random_stats(config.n_mels, np.random.default_rng(seed))
    state["normalize.mean"], state["normalize.std"] = normaliser_buffers(stats)
    return state, config.to_dict()
