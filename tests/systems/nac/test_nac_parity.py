"""B4 parity on random weights, CPU, test sizes: our modules and loops against the transcribed reference
(``reference_bark.py``: Suno's networks, the coqui fork's loops), transformers' ``HubertModel`` and the ``encodec``
package, each fed the imported set's tensors (``voxanon models import nac`` on a faithful fixture release)."""
from __future__ import annotations

import numpy as np
import pytest
import resampy
import torch

from tests.reference import bark as ref
from tests.helpers.nac_fixtures import (reference_coarse, reference_encodec, reference_fine, reference_hubert,
                                        reference_prompt, reference_quantiser, write_release)
from voxanon.models.nets.nac.bark import CoarseGPT, FineGPT, GptConfig, VoicePrompt, generate_coarse, generate_fine
from voxanon.models.checkpoints.nac import import_nac, load_component
from voxanon.models.dsp.resample import resample_kaiser_best
from voxanon.models.nets.nac.semantic import SemanticQuantiser, semantic_tokens
from voxanon.models.checkpoints.registry import load_model_set, write_model_set

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The fixture release imported and installed; (model set, reference networks)."""
    root = write_release(tmp_path_factory.mktemp("release"))
    components, config = import_nac(root)
    home = tmp_path_factory.mktemp("models")
    write_model_set("nac", components, config, source="fixture", random=False, root=home)
    model_set = load_model_set("nac", root=home)
    return model_set, {"coarse": reference_coarse(), "fine": reference_fine(), "encodec": reference_encodec(),
                       "hubert": reference_hubert(), "quantiser": reference_quantiser()}


def speech(seed: int, seconds: float) -> np.ndarray:
    from tests.helpers.corpora import synthetic_vowel

    return synthetic_vowel(110.0 + 20 * seed, [(700, 80), (1200, 100), (2600, 150)], seconds, seed=seed)


def prompt(seed: int) -> VoicePrompt:
    return VoicePrompt(*reference_prompt(seed))


def test_semantic_tokens_equal_the_reference(imported):
    model_set, references = imported
    hubert, quantiser = load_component(model_set, "hubert"), load_component(model_set, "quantiser")
    for seed, seconds in ((0, 1.3), (1, 2.0)):
        wave = speech(seed, seconds)
        expected = ref.reference_semantic_tokens(references["hubert"], references["quantiser"], wave)
        tokens = semantic_tokens(hubert, quantiser, wave, 9)
        assert len(np.unique(expected)) >= 4  # the test can tell tokens apart
        np.testing.assert_array_equal(tokens, expected)


def test_coarse_logits_and_a_kv_cache_step(imported):
    model_set, references = imported
    ours, theirs = load_component(model_set, "coarse"), references["coarse"]
    idx = torch.randint(0, 12_096, (1, 300), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected, cache = theirs(idx, use_cache=True)
        logits, past = ours(idx)
        torch.testing.assert_close(logits, expected[:, 0], rtol=0, atol=1e-5)
        step = torch.tensor([[10_500]])
        expected_step, _ = theirs(step, use_cache=True, past_kv=cache)
        logits_step, _ = ours(step, past)
        torch.testing.assert_close(logits_step, expected_step[:, 0], rtol=0, atol=1e-5)
        full, _ = theirs(torch.cat([idx, step], dim=1))  # the cached step is the uncached forward's last position
        torch.testing.assert_close(logits_step, full[:, 0], rtol=0, atol=1e-5)


def test_fine_logits_and_tied_weights(imported):
    model_set, references = imported
    ours, theirs = load_component(model_set, "fine"), references["fine"]
    idx = torch.randint(0, 1056, (1, 1024, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for codebook in range(1, 8):
            torch.testing.assert_close(ours(codebook, idx), theirs(codebook, idx), rtol=0, atol=1e-5)
    for i, head in enumerate(ours.lm_heads):
        assert ours.transformer.wtes[i + 1].weight is head.weight
    assert ours.transformer.wtes[0].weight is not ours.lm_heads[0].weight


def test_deterministic_coarse_and_fine_tokens_equal_the_references(imported):
    """top-1 coarse (the reference's top_k=1, KV cache; several windows, with and without a prompt), argmax fine
    (on those coarse codes, and on longer random ones: several 1,024-frame windows)."""
    model_set, references = imported
    coarse_model, fine_model = load_component(model_set, "coarse"), load_component(model_set, "fine")
    bark = ref.BarkReference(references["coarse"], references["fine"], references["encodec"])
    rng = np.random.default_rng(5)
    for voice, n_semantic in ((prompt(20), 70), (None, 25), (prompt(21), 150)):
        semantic = rng.integers(0, 10_000, n_semantic)
        history = (voice.semantic, voice.coarse, voice.fine) if voice else (None, None, None)
        expected_coarse = ref.generate_coarse(semantic, bark, history_prompt=history, temp=0.7, top_k=1, silent=True)
        coarse = generate_coarse(coarse_model, [semantic], [voice], [torch.Generator()], top_k=1)[0]
        np.testing.assert_array_equal(coarse, expected_coarse)
        expected_fine = ref.generate_fine(expected_coarse, bark, history_prompt=history, temp=None)
        fine = generate_fine(fine_model, [coarse], [voice], [torch.Generator()], temperature=None)[0]
        np.testing.assert_array_equal(fine, expected_fine)
        assert fine.shape == (8, coarse.shape[1])
    for voice, frames in ((prompt(22), 1300), (None, 1100)):
        coarse = rng.integers(0, 1024, (2, frames))
        history = (voice.semantic, voice.coarse, voice.fine) if voice else (None, None, None)
        expected_fine = ref.generate_fine(coarse, bark, history_prompt=history, temp=None)
        fine = generate_fine(fine_model, [coarse], [voice], [torch.Generator()], temperature=None)[0]
        np.testing.assert_array_equal(fine, expected_fine)


def test_batched_sampling_equals_one_at_a_time(imported):
    """Utterances of different lengths and prompts in one batch: the same tokens as one by one, deterministic
    and sampled (each utterance's own generator)."""
    model_set, _ = imported
    coarse_model, fine_model = load_component(model_set, "coarse"), load_component(model_set, "fine")
    rng = np.random.default_rng(6)
    semantics = [rng.integers(0, 10_000, n) for n in (20, 70, 45)]
    voices = [prompt(30), None, prompt(31)]
    for top_k, temperature in ((1, None), (None, 0.5)):
        def generators():
            return [torch.Generator().manual_seed(100 + i) for i in range(3)]

        batched = generate_coarse(coarse_model, semantics, voices, generators(), top_k=top_k)
        single = [generate_coarse(coarse_model, [s], [v], [g], top_k=top_k)[0]
                  for s, v, g in zip(semantics, voices, generators())]
        for a, b in zip(batched, single):
            np.testing.assert_array_equal(a, b)
        fine_batched = generate_fine(fine_model, batched, voices, generators(), temperature=temperature)
        fine_single = [generate_fine(fine_model, [c], [v], [g], temperature=temperature)[0]
                       for c, v, g in zip(batched, voices, generators())]
        for a, b in zip(fine_batched, fine_single):
            np.testing.assert_array_equal(a, b)


def test_sampling_follows_the_generator(imported):
    model_set, _ = imported
    coarse_model = load_component(model_set, "coarse")
    semantic = np.arange(60) * 97 % 10_000
    runs = [generate_coarse(coarse_model, [semantic], [None], [torch.Generator().manual_seed(s)])[0] for s in (1, 1, 2)]
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])


def test_encodec_decode_is_bit_identical(imported):
    model_set, references = imported
    decoder, reference = load_component(model_set, "encodec"), references["encodec"]
    for frames in (3, 40, 151):
        codes = torch.randint(0, 1024, (1, 8, frames), generator=torch.Generator().manual_seed(frames))
        with torch.no_grad():
            expected = reference.decoder(reference.quantizer.decode(codes.transpose(0, 1)))[:, 0]
            assert torch.equal(decoder(codes), expected)
        assert expected.shape[-1] == 320 * frames


def test_whole_chain_on_three_utterances_equals_the_reference(imported):
    """Semantic tokens, top-1 coarse, argmax fine and EnCodec on 3 utterances with 3 voices: the same 24 kHz
    waveform, bit for bit, and our 16 kHz output is its kaiser_best resampling."""
    model_set, references = imported
    names = model_set.config["voices"]
    from voxanon.models.checkpoints.nac import load_voices

    voices = load_voices(model_set)
    modules = {name: load_component(model_set, name) for name in ("hubert", "quantiser", "coarse", "fine", "encodec")}
    bark = ref.BarkReference(references["coarse"], references["fine"], references["encodec"])
    for seed, name in enumerate(names):
        wave = speech(seed, 0.6 + 0.3 * seed)
        voice = voices[name]
        history = (voice.semantic, voice.coarse, voice.fine)
        semantic = ref.reference_semantic_tokens(references["hubert"], references["quantiser"], wave)
        coarse = ref.generate_coarse(semantic, bark, history_prompt=history, temp=0.7, top_k=1, silent=True)
        fine = ref.generate_fine(coarse, bark, history_prompt=history, temp=None)
        with torch.no_grad():  # as the recipe's inference.py calls the anonymiser
            expected = ref.codec_decode(fine, bark)

        ours_semantic = semantic_tokens(modules["hubert"], modules["quantiser"], wave, 9)
        ours_coarse = generate_coarse(modules["coarse"], [ours_semantic], [voice], [torch.Generator()], top_k=1)
        ours_fine = generate_fine(modules["fine"], ours_coarse, [voice], [torch.Generator()], temperature=None)
        np.testing.assert_array_equal(ours_semantic, semantic)
        np.testing.assert_array_equal(ours_coarse[0], coarse)
        np.testing.assert_array_equal(ours_fine[0], fine)
        with torch.no_grad():
            audio = modules["encodec"](torch.from_numpy(ours_fine[0])[None]).numpy()[0]
        np.testing.assert_array_equal(audio, expected)
        assert abs(len(resample_kaiser_best(audio, 24000, 16000)) - len(wave)) <= 0.040 * 16000


@pytest.mark.parametrize("rate, new_rate", [(24000, 16000), (16000, 24000), (44100, 16000)])
@pytest.mark.parametrize("length", [3, 7, 100, 72005])
def test_kaiser_best_resampling_matches_resampy(rate, new_rate, length):
    """resampy's own kaiser_best (the reference B4's recipe reaches through librosa 0.9.2), then librosa's length
    fix (zero-padded or cut to ceil(len x ratio)); the filter table is recomputed, within 1e-8 of resampy's.
    resampy is a locked test dependency: without it the module fails to import, it does not skip."""
    x = np.random.default_rng(length).standard_normal(length)
    expected = resampy.resample(x, rate, new_rate, filter="kaiser_best", axis=-1)
    target = int(np.ceil(length * new_rate / rate))
    expected = np.pad(expected, (0, max(0, target - len(expected))))[:target]
    ours = resample_kaiser_best(x, rate, new_rate)
    assert ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-6)


def test_kaiser_best_resampling_keeps_a_tone():
    rate = 24000
    t = np.arange(rate) / rate
    y = resample_kaiser_best(np.sin(2 * np.pi * 1000 * t), rate, 16000)
    assert len(y) == 16000
    expected = np.sin(2 * np.pi * 1000 * np.arange(16000) / 16000)
    assert np.abs(y[2000:-2000] - expected[2000:-2000]).max() < 1e-4
    # Above the new Nyquist frequency, nothing is left.
    assert np.abs(resample_kaiser_best(np.sin(2 * np.pi * 9000 * t), rate, 16000)[2000:-2000]).max() < 1e-4


def test_modules_hold_the_published_keys():
    config = GptConfig(n_layer=1, n_head=1, n_embd=8, input_vocab_size=20, output_vocab_size=20)
    reference = ref.GPT(ref.GPTConfig(**{**config.to_dict(), "bias": False}))
    assert set(CoarseGPT(config).state_dict()) == set(reference.state_dict())
    fine = GptConfig(n_layer=1, n_head=1, n_embd=8, input_vocab_size=20, output_vocab_size=20, n_codes_total=8,
                     n_codes_given=1)
    assert set(FineGPT(fine).state_dict()) == set(ref.FineGPT(ref.FineGPTConfig(**fine.to_dict())).state_dict())
    assert set(SemanticQuantiser(8, 4, 10).state_dict()) == set(ref.HubertTokenizer(4, 8, 10).state_dict())


def test_bfloat16_autocast_batches(imported):
    """The GPU form's precision (bfloat16 autocast), here on the CPU: valid codes of the right shapes."""
    model_set, _ = imported
    coarse_model, fine_model = load_component(model_set, "coarse"), load_component(model_set, "fine")
    semantics = [np.arange(n) * 37 % 10_000 for n in (25, 40)]
    generators = [torch.Generator().manual_seed(i) for i in range(2)]
    coarse = generate_coarse(coarse_model, semantics, [prompt(40), None], generators, dtype=torch.bfloat16)
    fine = generate_fine(fine_model, coarse, [prompt(40), None], generators, dtype=torch.bfloat16)
    for semantic, c, f in zip(semantics, coarse, fine):
        assert c.shape == (2, int(len(semantic) * 75 / 49.9)) and f.shape == (8, c.shape[1])
        assert 0 <= f.min() and f.max() < 1024 and np.array_equal(f[:2], c)
