"""Bark's coarse and fine acoustic GPTs (Suno, MIT), as VoicePrivacy 2024 B4 runs them, and our sampling loops.

The networks are nanoGPT as Bark publishes it (``bark/model.py``, ``bark/model_fine.py``), with the published
state-dict keys (``transformer.wte``, ``transformer.h.N.attn.c_attn``, ``lm_head``; the fine model's
``transformer.wtes.N`` and ``lm_heads.N``, ``lm_heads.i`` tied to ``wtes.i+1``):

* :class:`CoarseGPT`: causal, pre-norm blocks, layer norms and linears with a bias only when ``bias``;
  the logits of the last position only; a KV cache (:meth:`CoarseGPT.forward`'s ``past``).
* :class:`FineGPT`: non-causal; codebook ``k`` is predicted from the sum of the embeddings of codebooks
  0..k; its layer norms always have a bias (``nn.LayerNorm``), its linears as ``bias`` says.

The loops follow the reference (the coqui TTS fork the challenge pins, ``TTS/tts/layers/bark/inference_funcs.py``;
Suno's ``generate_coarse``/``generate_fine`` are the same algorithms):

* coarse (:func:`generate_coarse`): 2 codebooks at 75 Hz interleaved, ``n_steps`` = floor(semantic frames ×
  75 / 49.9) × 2; windows of 60 steps, each fed 256 semantic tokens (from the window's position minus the
  semantic history, padded with 12,048), the infer token 12,050 and up to 630 coarse tokens of history, then
  60 steps with a KV cache; each step samples codebook 0 or 1's logits (``temperature``, optional
  ``top_k``); the voice prompt's last semantic and coarse tokens are the initial history (its coarse
  history less its last 2 tokens, the reference's alignment hack);
* fine (:func:`generate_fine`): the prompt's last 512 fine frames, then the coarse codes with codebooks
  2..7 set to 1,024 (padding), padded to at least 1,024 frames; windows of 1,024 frames every 512; in each,
  codebooks 2..7 in turn, from the window's first new frame on: argmax (``temperature`` None) or a draw.

Every draw takes the utterance's own :class:`torch.Generator` (passed in), on the CPU, from float32
probabilities: the same seed gives the same tokens whatever the batch. The reference draws from torch's
global generator (unseeded), and in the fine stage one ``multinomial`` per position; here one call per
window and codebook, the same distribution.

Batches: both loops take a list of utterances. The coarse loop runs the active utterances of a window
together, left-padded to the longest input, with per-row positions and a key mask (each padded query
attends to itself, so no row is empty); the fine windows are all 1,024 frames, so they stack unpadded.
A batch of one takes the reference's exact calls (``is_causal`` attention, no mask).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SEMANTIC_VOCAB_SIZE = 10_000
SEMANTIC_RATE_HZ = 49.9
CODEBOOK_SIZE = 1024
N_COARSE_CODEBOOKS = 2
N_FINE_CODEBOOKS = 8
COARSE_RATE_HZ = 75
COARSE_SEMANTIC_PAD_TOKEN = 12_048
COARSE_INFER_TOKEN = 12_050
SEMANTIC_WINDOW = 256
FINE_WINDOW = 1024
FINE_HOP = 512
SEMANTIC_TO_COARSE = COARSE_RATE_HZ / SEMANTIC_RATE_HZ * N_COARSE_CODEBOOKS


@dataclass(frozen=True)
class GptConfig:
    """Bark's ``model_args`` (``vocab_size`` in older checkpoints is both vocabularies); the fine model's has
    ``n_codes_total`` and ``n_codes_given``."""

    n_layer: int
    n_head: int
    n_embd: int
    input_vocab_size: int
    output_vocab_size: int
    block_size: int = 1024
    bias: bool = False
    dropout: float = 0.0
    n_codes_total: int | None = None
    n_codes_given: int | None = None

    def to_dict(self) -> dict:
        return {key: value for key, value in asdict(self).items() if value is not None}

    @classmethod
    def from_dict(cls, values: dict) -> "GptConfig":
        return cls(**values)


COARSE_FULL = GptConfig(n_layer=24, n_head=16, n_embd=1024, input_vocab_size=12_096, output_vocab_size=12_096)
FINE_FULL = GptConfig(n_layer=24, n_head=16, n_embd=1024, input_vocab_size=1056, output_vocab_size=1056,
                      n_codes_total=8, n_codes_given=1)


def _embedding(count: int, size: int) -> nn.Embedding:
    """An embedding left uninitialised: built on the meta device to receive a checkpoint's tensors, PyTorch's
    ``normal_`` initialisation would import ``torch._dynamo`` (seconds); :func:`init_random` draws random ones."""
    return nn.Embedding(count, size, _weight=torch.empty(count, size))


def init_random(model: nn.Module) -> nn.Module:
    """nanoGPT's initialisation of the embeddings (normal, standard deviation 0.02), for random model sets."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Embedding):
                module.weight.normal_(0.0, 0.02)
    return model


class LayerNorm(nn.Module):
    """Layer norm whose bias is optional (nanoGPT's)."""

    def __init__(self, size: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.bias = nn.Parameter(torch.zeros(size)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class SelfAttention(nn.Module):
    def __init__(self, config: GptConfig):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.n_head, self.n_embd = config.n_head, config.n_embd

    def forward(self, x, past=None, mask=None, causal=False):
        """``past``: (keys, values) of earlier positions; ``mask``: boolean (batch, 1, queries, keys), True where
        attended (overrides ``causal``). Returns (output, (keys, values))."""
        b, t, c = x.shape
        q, k, v = (part.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                   for part in self.c_attn(x).split(self.n_embd, dim=2))
        if past is not None:
            k, v = torch.cat((past[0], k), dim=-2), torch.cat((past[1], v), dim=-2)
        if mask is not None:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            # With a cache the query is the last position, which sees every key (the reference's is_causal=False).
            y = F.scaled_dot_product_attention(q, k, v, is_causal=causal and past is None)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c)), (k, v)


class Mlp(nn.Module):
    def __init__(self, config: GptConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GptConfig, fine: bool = False):
        super().__init__()
        norm = (lambda: nn.LayerNorm(config.n_embd)) if fine else (lambda: LayerNorm(config.n_embd, config.bias))
        self.ln_1, self.attn, self.ln_2, self.mlp = norm(), SelfAttention(config), norm(), Mlp(config)

    def forward(self, x, past=None, mask=None, causal=False):
        attended, present = self.attn(self.ln_1(x), past, mask, causal)
        x = x + attended
        return x + self.mlp(self.ln_2(x)), present


class CoarseGPT(nn.Module):
    """Bark's causal GPT (``bark/model.py``'s ``GPT``), for the coarse acoustic tokens."""

    def __init__(self, config: GptConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=_embedding(config.input_vocab_size, config.n_embd),
            wpe=_embedding(config.block_size, config.n_embd),
            h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
            ln_f=LayerNorm(config.n_embd, config.bias)))
        self.lm_head = nn.Linear(config.n_embd, config.output_vocab_size, bias=False)

    def forward(self, idx, past=None, positions=None, mask=None):
        """``idx`` (batch, tokens) -> (logits of the last position (batch, vocabulary), the new cache).
        ``positions`` (batch, tokens) default to those after the cache; ``mask`` as :class:`SelfAttention`'s."""
        past_length = 0 if past is None else past[0][0].shape[-2]
        if positions is None:
            positions = torch.arange(past_length, past_length + idx.shape[1], device=idx.device)[None]
        x = self.transformer.wte(idx) + self.transformer.wpe(positions)
        cache = []
        for i, block in enumerate(self.transformer.h):
            x, present = block(x, None if past is None else past[i], mask, causal=True)
            cache.append(present)
        return self.lm_head(self.transformer.ln_f(x[:, -1])), cache


class FineGPT(nn.Module):
    """Bark's non-causal GPT (``bark/model_fine.py``'s ``FineGPT``), filling codebooks from the coarse ones."""

    def __init__(self, config: GptConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wtes=nn.ModuleList(_embedding(config.input_vocab_size, config.n_embd)
                               for _ in range(config.n_codes_total)),
            wpe=_embedding(config.block_size, config.n_embd),
            h=nn.ModuleList(Block(config, fine=True) for _ in range(config.n_layer)),
            ln_f=nn.LayerNorm(config.n_embd)))
        self.lm_heads = nn.ModuleList(nn.Linear(config.n_embd, config.output_vocab_size, bias=False)
                                      for _ in range(config.n_codes_given, config.n_codes_total))
        for i, head in enumerate(self.lm_heads):
            self.transformer.wtes[i + 1].weight = head.weight

    def forward(self, pred_idx: int, idx):
        """Logits (batch, frames, vocabulary) of codebook ``pred_idx`` from ``idx`` (batch, frames, codebooks)."""
        positions = torch.arange(idx.shape[1], device=idx.device)[None]
        x = sum(self.transformer.wtes[i](idx[:, :, i]) for i in range(pred_idx + 1))
        x = x + self.transformer.wpe(positions)
        for block in self.transformer.h:
            x = block(x)[0]
        return self.lm_heads[pred_idx - self.config.n_codes_given](self.transformer.ln_f(x))


# Sampling ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class VoicePrompt:
    """A Bark voice (``.npz``): semantic (n,), coarse (2, m) and fine (8, m) tokens."""

    semantic: np.ndarray
    coarse: np.ndarray
    fine: np.ndarray


def draw(logits: torch.Tensor, temperature: float | None, top_k: int | None, generator: torch.Generator):
    """Token indices from ``logits`` (..., vocabulary), float32 on the CPU: argmax when ``temperature`` is None,
    else a draw from softmax(logits / temperature) restricted to the ``top_k`` largest."""
    if temperature is None:
        return torch.argmax(logits, -1)
    if top_k is not None:
        threshold = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < threshold, -math.inf)
    probs = F.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=generator).reshape(probs.shape[:-1])


def coarse_history(prompt: VoicePrompt | None, max_history: int) -> tuple[np.ndarray, np.ndarray]:
    """(semantic history, flattened coarse history in the coarse model's vocabulary) from a voice prompt."""
    if prompt is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    max_semantic = int(np.floor(max_history / SEMANTIC_TO_COARSE))
    offsets = SEMANTIC_VOCAB_SIZE + CODEBOOK_SIZE * np.arange(N_COARSE_CODEBOOKS)[:, None]
    coarse = (prompt.coarse.astype(np.int64) + offsets).ravel("F")
    semantic = prompt.semantic.astype(np.int64)
    n_semantic = min(max_semantic, len(semantic) - len(semantic) % 2, int(np.floor(len(coarse) / SEMANTIC_TO_COARSE)))
    n_coarse = int(round(n_semantic * SEMANTIC_TO_COARSE))
    semantic = semantic[len(semantic) - n_semantic:]
    return semantic, coarse[len(coarse) - n_coarse:][:-2]


def coarse_steps(n_semantic: int) -> int:
    return int(round(np.floor(n_semantic * SEMANTIC_TO_COARSE / N_COARSE_CODEBOOKS) * N_COARSE_CODEBOOKS))


@dataclass
class _CoarseState:
    semantic: np.ndarray
    coarse: list
    history: int
    base: int
    steps: int
    done: int = 0


def _window_input(state: _CoarseState, max_history: int) -> list[int]:
    max_semantic = int(np.floor(max_history / SEMANTIC_TO_COARSE))
    index = state.base + int(round(state.done / SEMANTIC_TO_COARSE))
    semantic = state.semantic[max(0, index - max_semantic):][:SEMANTIC_WINDOW].tolist()
    semantic += [COARSE_SEMANTIC_PAD_TOKEN] * (SEMANTIC_WINDOW - len(semantic))
    return semantic + [COARSE_INFER_TOKEN] + state.coarse[max(0, len(state.coarse) - max_history):]


def generate_coarse(model: CoarseGPT, semantics: list[np.ndarray], prompts: list[VoicePrompt | None],
                    generators: list[torch.Generator], temperature: float | None = 0.7, top_k: int | None = None,
                    max_history: int = 630, window: int = 60, dtype: torch.dtype | None = None) -> list[np.ndarray]:
    """Coarse codes (2, frames) of each utterance (module doc); ``dtype``: autocast to it."""
    device = next(model.parameters()).device
    states = []
    for semantic, prompt in zip(semantics, prompts):
        semantic_history, coarse = coarse_history(prompt, max_history)
        states.append(_CoarseState(np.concatenate([semantic_history, semantic.astype(np.int64)]), coarse.tolist(),
                                   len(coarse), len(semantic_history), coarse_steps(len(semantic))))
    with torch.inference_mode(), _autocast(device, dtype):
        while active := [i for i, state in enumerate(states) if state.done < state.steps]:
            _coarse_window(model, [states[i] for i in active], [generators[i] for i in active], temperature, top_k,
                           max_history, window, device)
    codes = []
    for state in states:
        flat = np.asarray(state.coarse[state.history:], dtype=np.int64).reshape(-1, N_COARSE_CODEBOOKS).T
        codes.append(flat - SEMANTIC_VOCAB_SIZE - CODEBOOK_SIZE * np.arange(N_COARSE_CODEBOOKS)[:, None])
    return codes


def _coarse_window(model, states, generators, temperature, top_k, max_history, window, device) -> None:
    inputs = [_window_input(state, max_history) for state in states]
    longest = max(map(len, inputs))
    pads = [longest - len(tokens) for tokens in inputs]
    idx = torch.tensor([[0] * pad + tokens for pad, tokens in zip(pads, inputs)], device=device)
    if len(states) == 1:
        positions, valid, mask = None, None, None
    else:
        pad = torch.tensor(pads, device=device)[:, None]
        positions = (torch.arange(longest, device=device)[None] - pad).clamp(min=0)
        valid = torch.arange(longest, device=device)[None] >= pad
        causal = torch.ones(longest, longest, dtype=torch.bool, device=device).tril()
        mask = (causal & valid[:, None, :]) | torch.eye(longest, dtype=torch.bool, device=device)
        mask = mask[:, None]
    past = None
    for step in range(window):
        if all(state.done >= state.steps for state in states):
            break
        logits, past = model(idx, past, positions, mask)
        logits = logits.float().cpu()
        chosen = []
        for row, (state, generator) in enumerate(zip(states, generators)):
            if state.done >= state.steps:
                chosen.append(COARSE_INFER_TOKEN)  # fed but never read: this row's windows are over
                continue
            start = SEMANTIC_VOCAB_SIZE + (state.done % N_COARSE_CODEBOOKS) * CODEBOOK_SIZE
            token = start + int(draw(logits[row, start:start + CODEBOOK_SIZE], temperature, top_k, generator))
            state.coarse.append(token)
            state.done += 1
            chosen.append(token)
        idx = torch.tensor(chosen, device=device)[:, None]
        if positions is not None:
            positions = positions[:, -1:] + 1
            valid = torch.cat([valid, torch.ones_like(valid[:, :1])], dim=1)
            mask = valid[:, None, None, :]


def fine_input(coarse: np.ndarray, prompt: VoicePrompt | None) -> tuple[np.ndarray, int, int]:
    """(frames × 8 token array, frames of history, frames of padding at the end) as the reference builds it."""
    frames = coarse.shape[1]
    codes = np.vstack([coarse, np.full((N_FINE_CODEBOOKS - coarse.shape[0], frames), CODEBOOK_SIZE)]).astype(np.int64)
    history = 0
    if prompt is not None:
        fine = prompt.fine.astype(np.int64)[:, -FINE_HOP:]
        codes, history = np.hstack([fine, codes]), fine.shape[1]
    padding = max(0, FINE_WINDOW - codes.shape[1])
    codes = np.hstack([codes, np.full((N_FINE_CODEBOOKS, padding), CODEBOOK_SIZE)])
    return codes.T.copy(), history, padding


def generate_fine(model: FineGPT, coarse_codes: list[np.ndarray], prompts: list[VoicePrompt | None],
                  generators: list[torch.Generator], temperature: float | None = 0.5,
                  dtype: torch.dtype | None = None) -> list[np.ndarray]:
    """All 8 codebooks (8, frames) of each utterance (module doc)."""
    device = next(model.parameters()).device
    items = [fine_input(coarse, prompt) for coarse, prompt in zip(coarse_codes, prompts)]
    arrays = [torch.from_numpy(codes) for codes, _, _ in items]
    loops = [max(0, int(np.ceil((coarse.shape[1] - (FINE_WINDOW - history) ) / FINE_HOP))) + 1
             for coarse, (_, history, _) in zip(coarse_codes, items)]
    n_given = coarse_codes[0].shape[0] if coarse_codes else N_COARSE_CODEBOOKS
    with torch.inference_mode(), _autocast(device, dtype):
        for n in range(max(loops, default=0)):
            rows = [i for i, count in enumerate(loops) if n < count]
            starts = [min(n * FINE_HOP, len(arrays[i]) - FINE_WINDOW) for i in rows]
            fills = [min(items[i][1] + n * FINE_HOP, len(arrays[i]) - FINE_HOP) for i in rows]
            buffer = torch.stack([arrays[i][s:s + FINE_WINDOW] for i, s in zip(rows, starts)]).to(device)
            for codebook in range(n_given, N_FINE_CODEBOOKS):
                logits = model(codebook, buffer)[..., :CODEBOOK_SIZE].float().cpu()
                for row, (i, start, fill) in enumerate(zip(rows, starts, fills)):
                    relative = fill - start
                    buffer[row, relative:, codebook] = draw(logits[row, relative:], temperature, None,
                                                            generators[i]).to(device)
            buffer = buffer.cpu()
            for row, (i, start, fill) in enumerate(zip(rows, starts, fills)):
                arrays[i][fill:fill + FINE_WINDOW - (fill - start), n_given:] = buffer[row, fill - start:, n_given:]
    result = []
    for array, (_, history, padding) in zip(arrays, items):
        codes = array.numpy().T[:, history:]
        result.append(codes[:, :codes.shape[1] - padding])
    return result


def _autocast(device: torch.device, dtype: torch.dtype | None):
    """Autocast to ``dtype`` (the reference's bfloat16 on a GPU that supports it); nothing for float32."""
    import contextlib

    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)
