"""B3's phone recogniser: ESPnet's ``Speech2Text`` as the VoicePrivacy 2024 recipe runs it (``ims_asr.py``), in
our own compact modules whose state-dict keys are ESPnet's ``ESPnetASRModel`` keys.

The chain: a log-mel front end (``torch.stft`` with a Hann window, power, the checkpoint's own mel matrix, log
of at least 1e-10), global mean/variance normalisation with the checkpoint's statistics, a Branchformer encoder
(conv2d subsampling by 4, relative-position self-attention beside a convolutional gating MLP, merged by concat),
then a joint CTC/attention beam search: a Transformer decoder scores every token, the best ``1.5 × beam`` of
them (``pre_beam_size``) are scored by CTC prefix probabilities, and ``(1 - ctc_weight) · decoder + ctc_weight ·
ctc`` ranks the beam. Each step and the end rule (``end_detect``: three lengths in a row whose best ended
hypothesis is 10 nats behind the best one) follow ESPnet's ``BatchBeamSearch`` operation by operation, so the
best hypothesis is ESPnet's. What does not change from step to step is computed once: the decoder's source
attention keys and values (ESPnet recomputes them for every hypothesis at every step) and its self-attention
keys and values of past positions (ESPnet recomputes the whole prefix). That changes the last bits of scores
only (the tests check the hypotheses are ESPnet's).

The text: token ids → tokens → ESPnet's tokenizer's ``tokens2text`` (sentencepiece pieces, characters or phones)
wrapped in the recipe's ``utt_start_token`` / ``utt_end_token`` (``~`` and ``~#``).

Utterances are encoded one at a time: the cgMLP's depthwise convolution sees padding, so a padded batch would
not give an utterance's own encoding. The beam's hypotheses are scored as one batch, as ESPnet does.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn

LOG_ZERO = -10000000000.0
"""ESPnet's CTC prefix scorer's log(0)."""

END_DETECT_MARGIN = float(np.log(1 * np.exp(-10)))
"""ESPnet's ``end_detect`` margin ``D_end``, computed as ESPnet computes it."""

SENTENCEPIECE_SPACE = "\u2581"
SENTENCEPIECE_UNKNOWN_SURFACE = " \u2047 "
"""What sentencepiece's ``DecodePieces`` writes for its unknown piece."""


class UtteranceTooShortError(ValueError):
    """Fewer feature frames than the conv2d subsampling needs (ESPnet's ``TooShortUttError``)."""


class NoHypothesisError(ValueError):
    """The beam search ended without a finished hypothesis (ESPnet returns no result; the recipe then fails)."""


@dataclass(frozen=True)
class RecogniserConfig:
    """Everything :func:`build_recogniser` and :func:`recognise` need; JSON-able (``asdict``)."""
    token_list: tuple[str, ...]
    token_type: str = "bpe"
    sample_rate: int = 16000
    n_fft: int = 512
    win_length: int = 512
    hop_length: int = 160
    n_mels: int = 80
    output_size: int = 512
    attention_heads: int = 8
    cgmlp_linear_units: int = 3072
    cgmlp_conv_kernel: int = 31
    num_blocks: int = 18
    decoder_attention_heads: int = 8
    decoder_linear_units: int = 2048
    decoder_num_blocks: int = 6
    beam_size: int = 15
    ctc_weight: float = 0.2
    utt_start_token: str = "~"
    utt_end_token: str = "~#"
    space_symbol: str = "<space>"
    extra: dict = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return len(self.token_list)

    def to_dict(self) -> dict:
        values = asdict(self)
        values["token_list"] = list(self.token_list)
        return values

    @classmethod
    def from_dict(cls, values: dict) -> "RecogniserConfig":
        values = dict(values)
        values["token_list"] = tuple(values["token_list"])
        return cls(**values)


class LayerNorm(nn.LayerNorm):
    """ESPnet's LayerNorm: epsilon 1e-12."""

    def __init__(self, size: int):
        super().__init__(size, eps=1e-12)


class LogMel(nn.Module):
    def __init__(self, n_freq: int, n_mels: int):
        super().__init__()
        self.register_buffer("melmat", torch.zeros(n_freq, n_mels))


class Frontend(nn.Module):
    def __init__(self, config: RecogniserConfig):
        super().__init__()
        self.logmel = LogMel(config.n_fft // 2 + 1, config.n_mels)


class GlobalNormaliser(nn.Module):
    """ESPnet's GlobalMVN: float64 statistics, applied in the features' float32."""

    def __init__(self, n_mels: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(n_mels, dtype=torch.float64))
        self.register_buffer("std", torch.ones(n_mels, dtype=torch.float64))


def sinusoids(length: int, size: int, positions: torch.Tensor) -> torch.Tensor:
    """ESPnet's positional table rows for ``positions`` (float32, computed as ESPnet computes them)."""
    table = torch.zeros(length, size)
    div_term = torch.exp(torch.arange(0, size, 2, dtype=torch.float32) * -(math.log(10000.0) / size))
    table[:, 0::2] = torch.sin(positions.unsqueeze(1) * div_term)
    table[:, 1::2] = torch.cos(positions.unsqueeze(1) * div_term)
    return table


def relative_positions(frames: int, size: int) -> torch.Tensor:
    """ESPnet's ``RelPositionalEncoding`` (latest) rows for relative offsets ``frames-1 .. -(frames-1)``:
    (1, 2·frames-1, size)."""
    position = torch.arange(0, frames, dtype=torch.float32)
    positive = torch.flip(sinusoids(frames, size, position), [0])
    negative = sinusoids(frames, size, -1 * position)[1:]
    return torch.cat([positive, negative], dim=0).unsqueeze(0)


class Subsampling(nn.Module):
    """ESPnet's Conv2dSubsampling (time and frequency by 4); ``out.0`` is its linear layer."""

    def __init__(self, n_mels: int, size: int):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, size, 3, 2), nn.ReLU(), nn.Conv2d(size, size, 3, 2), nn.ReLU())
        self.out = nn.Sequential(nn.Linear(size * (((n_mels - 1) // 2 - 1) // 2), size))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.conv(features.unsqueeze(1))
        b, c, t, f = x.size()
        return self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))


class MultiHeadedAttention(nn.Module):
    def __init__(self, heads: int, size: int):
        super().__init__()
        self.d_k = size // heads
        self.h = heads
        self.linear_q = nn.Linear(size, size)
        self.linear_k = nn.Linear(size, size)
        self.linear_v = nn.Linear(size, size)
        self.linear_out = nn.Linear(size, size)

    def heads(self, linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return linear(x).view(x.size(0), -1, self.h, self.d_k).transpose(1, 2)

    def attend(self, scores: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        x = torch.matmul(torch.softmax(scores, dim=-1), value)
        return self.linear_out(x.transpose(1, 2).contiguous().view(x.size(0), -1, self.h * self.d_k))

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """Unmasked attention (every key is valid: one utterance, or a decoder prefix's past)."""
        q, k, v = self.heads(self.linear_q, query), self.heads(self.linear_k, key), self.heads(self.linear_v, value)
        return self.attend(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k), v)


class RelPositionAttention(MultiHeadedAttention):
    """ESPnet's RelPositionMultiHeadedAttention (Transformer-XL style, ``zero_triu`` off)."""

    def __init__(self, heads: int, size: int):
        super().__init__(heads, size)
        self.linear_pos = nn.Linear(size, size, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(heads, size // heads))
        self.pos_bias_v = nn.Parameter(torch.zeros(heads, size // heads))

    @staticmethod
    def rel_shift(x: torch.Tensor) -> torch.Tensor:
        zero_pad = torch.zeros((*x.size()[:3], 1), device=x.device, dtype=x.dtype)
        padded = torch.cat([zero_pad, x], dim=-1).view(*x.size()[:2], x.size(3) + 1, x.size(2))
        return padded[:, :, 1:].view_as(x)[:, :, :, : x.size(-1) // 2 + 1]

    def forward(self, x: torch.Tensor, pos_emb: torch.Tensor) -> torch.Tensor:
        q = self.heads(self.linear_q, x).transpose(1, 2)
        k, v = self.heads(self.linear_k, x), self.heads(self.linear_v, x)
        p = self.linear_pos(pos_emb).view(pos_emb.size(0), -1, self.h, self.d_k).transpose(1, 2)
        matrix_ac = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))
        matrix_bd = self.rel_shift(torch.matmul((q + self.pos_bias_v).transpose(1, 2), p.transpose(-2, -1)))
        return self.attend((matrix_ac + matrix_bd) / math.sqrt(self.d_k), v)


class GatingUnit(nn.Module):
    """ESPnet's ConvolutionalSpatialGatingUnit (identity gate, no linear after the convolution)."""

    def __init__(self, units: int, kernel: int):
        super().__init__()
        channels = units // 2
        self.norm = LayerNorm(channels)
        self.conv = nn.Conv1d(channels, channels, kernel, 1, (kernel - 1) // 2, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_r, x_g = x.chunk(2, dim=-1)
        x_g = self.conv(self.norm(x_g).transpose(1, 2)).transpose(1, 2)
        return x_r * x_g


class GatingMlp(nn.Module):
    """ESPnet's ConvolutionalGatingMLP (cgMLP)."""

    def __init__(self, size: int, units: int, kernel: int):
        super().__init__()
        self.channel_proj1 = nn.Sequential(nn.Linear(size, units), nn.GELU())
        self.csgu = GatingUnit(units, kernel)
        self.channel_proj2 = nn.Linear(units // 2, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.channel_proj2(self.csgu(self.channel_proj1(x)))


class BranchformerLayer(nn.Module):
    """Attention and cgMLP branches side by side, merged by a linear layer over their concatenation."""

    def __init__(self, config: RecogniserConfig):
        super().__init__()
        size = config.output_size
        self.attn = RelPositionAttention(config.attention_heads, size)
        self.cgmlp = GatingMlp(size, config.cgmlp_linear_units, config.cgmlp_conv_kernel)
        self.norm_mha = LayerNorm(size)
        self.norm_mlp = LayerNorm(size)
        self.norm_final = LayerNorm(size)
        self.merge_proj = nn.Linear(size + size, size)

    def forward(self, x: torch.Tensor, pos_emb: torch.Tensor) -> torch.Tensor:
        x1 = self.attn(self.norm_mha(x), pos_emb)
        x2 = self.cgmlp(self.norm_mlp(x))
        return self.norm_final(x + self.merge_proj(torch.cat([x1, x2], dim=-1)))


class BranchformerEncoder(nn.Module):
    def __init__(self, config: RecogniserConfig):
        super().__init__()
        self.size = config.output_size
        self.embed = Subsampling(config.n_mels, config.output_size)
        self.encoders = nn.ModuleList(BranchformerLayer(config) for _ in range(config.num_blocks))
        self.after_norm = LayerNorm(config.output_size)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if features.size(1) < 7:
            raise UtteranceTooShortError(f"{features.size(1)} feature frames; the recogniser needs at least 7 "
                                         "(about 0.06 s of audio)")
        x = self.embed(features) * math.sqrt(self.size)
        pos_emb = relative_positions(x.size(1), self.size).to(x.device)
        for layer in self.encoders:
            x = layer(x, pos_emb)
        return self.after_norm(x)


class PositionwiseFeedForward(nn.Module):
    def __init__(self, size: int, units: int):
        super().__init__()
        self.w_1 = nn.Linear(size, units)
        self.w_2 = nn.Linear(units, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(torch.relu(self.w_1(x)))


class DecoderLayer(nn.Module):
    def __init__(self, config: RecogniserConfig):
        super().__init__()
        size = config.output_size
        self.self_attn = MultiHeadedAttention(config.decoder_attention_heads, size)
        self.src_attn = MultiHeadedAttention(config.decoder_attention_heads, size)
        self.feed_forward = PositionwiseFeedForward(size, config.decoder_linear_units)
        self.norm1 = LayerNorm(size)
        self.norm2 = LayerNorm(size)
        self.norm3 = LayerNorm(size)

    def source_keys(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The source attention's keys and values for one utterance's encoding (1, T, D): the same at every step."""
        return self.src_attn.heads(self.src_attn.linear_k, memory), self.src_attn.heads(self.src_attn.linear_v, memory)

    def step(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None,
             source: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """ESPnet's ``DecoderLayer.forward`` with a cache, for the newest position ``x`` (n, 1, D): its output
        and the self-attention keys and values of the whole prefix (``past``'s and its own). ESPnet recomputes
        the past positions' keys and values at every step; they do not change."""
        attention = self.self_attn
        normed = self.norm1(x)
        keys, values = attention.heads(attention.linear_k, normed), attention.heads(attention.linear_v, normed)
        if past is not None:
            keys, values = torch.cat([past[0], keys], dim=2), torch.cat([past[1], values], dim=2)
        q = attention.heads(attention.linear_q, normed)
        x = x + attention.attend(torch.matmul(q, keys.transpose(-2, -1)) / math.sqrt(attention.d_k), values)
        attention = self.src_attn
        q = attention.heads(attention.linear_q, self.norm2(x))
        source_keys, source_values = source
        x = x + attention.attend(torch.matmul(q, source_keys.transpose(-2, -1)) / math.sqrt(attention.d_k),
                                 source_values)
        return x + self.feed_forward(self.norm3(x)), (keys, values)


class TransformerDecoder(nn.Module):
    def __init__(self, config: RecogniserConfig):
        super().__init__()
        self.size = config.output_size
        # Given an uninitialised table: nn.Embedding's own normal_ init, built on the meta device (as model sets
        # are), first imports torch's decompositions, seconds per process.
        table = torch.empty(config.vocab_size, config.output_size)
        self.embed = nn.Sequential(nn.Embedding(config.vocab_size, config.output_size, _weight=table))
        self.decoders = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_num_blocks))
        self.after_norm = LayerNorm(config.output_size)
        self.output_layer = nn.Linear(config.output_size, config.vocab_size)

    def score(self, ys: torch.Tensor, past: list[tuple[torch.Tensor, torch.Tensor]] | None,
              sources: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, list]:
        """ESPnet's ``batch_score``: log-probabilities of the next token for each prefix ``ys`` (n, L), and each
        layer's self-attention keys and values for the whole prefix (the next step's ``past``)."""
        position = torch.tensor([ys.size(1) - 1], dtype=torch.float32)
        x = self.embed(ys[:, -1:]) * math.sqrt(self.size) + sinusoids(1, self.size, position).to(ys.device)
        new_past = []
        for index, layer in enumerate(self.decoders):
            x, layer_past = layer.step(x, None if past is None else past[index], sources[index])
            new_past.append(layer_past)
        return torch.log_softmax(self.output_layer(self.after_norm(x[:, -1])), dim=-1), new_past


class Ctc(nn.Module):
    def __init__(self, config: RecogniserConfig):
        super().__init__()
        self.ctc_lo = nn.Linear(config.output_size, config.vocab_size)


class Recogniser(nn.Module):
    """ESPnet's ESPnetASRModel's inference parts, with its state-dict keys."""

    def __init__(self, config: RecogniserConfig):
        super().__init__()
        self.config = config
        self.frontend = Frontend(config)
        self.normalize = GlobalNormaliser(config.n_mels)
        self.encoder = BranchformerEncoder(config)
        self.decoder = TransformerDecoder(config)
        self.ctc = Ctc(config)


def build_recogniser(config: RecogniserConfig | dict) -> Recogniser:
    if isinstance(config, dict):
        config = RecogniserConfig.from_dict(config)
    return Recogniser(config)


def fbank(model: Recogniser, audio_16k: np.ndarray) -> torch.Tensor:
    """Normalised log-mel features (1, frames, n_mels), float32, bit for bit ESPnet's ``DefaultFrontend`` and
    ``GlobalMVN`` for one utterance (same operations in the same order and memory layout)."""
    config = model.config
    device = model.frontend.logmel.melmat.device
    speech = torch.as_tensor(np.asarray(audio_16k, dtype=np.float32)).unsqueeze(0).to(device)
    window = torch.hann_window(config.win_length, dtype=speech.dtype, device=device)
    spectrum = torch.stft(speech.float(), n_fft=config.n_fft, win_length=config.win_length,
                          hop_length=config.hop_length, center=True, window=window, normalized=False,
                          onesided=True, return_complex=True)
    spectrum = torch.view_as_real(spectrum).type(speech.dtype).transpose(1, 2)
    power = spectrum[..., 0] ** 2 + spectrum[..., 1] ** 2
    features = torch.clamp(torch.matmul(power, model.frontend.logmel.melmat), min=1e-10).log()
    features -= model.normalize.mean.to(features.dtype)
    features /= model.normalize.std.to(features.dtype)
    return features


def encode(model: Recogniser, audio_16k: np.ndarray) -> torch.Tensor:
    """The encoder's output for one utterance: (T', output_size)."""
    with torch.inference_mode():
        return model.encoder(fbank(model, audio_16k))[0]


class CtcPrefixScorer:
    """ESPnet's ``CTCPrefixScoreTH`` for one utterance (batch 1, no margin): CTC prefix log-probabilities of
    each hypothesis extended by each scored token, with the same tensor operations."""

    def __init__(self, log_probs: torch.Tensor, blank: int, eos: int):
        self.blank, self.eos = blank, eos
        self.input_length, self.odim = log_probs.size(0), log_probs.size(1)
        frames = log_probs.unsqueeze(1)
        blanks = frames[:, :, blank].unsqueeze(2).expand(-1, -1, self.odim)
        self.x = torch.stack([frames, blanks])
        self.dtype, self.device = log_probs.dtype, log_probs.device

    def initial_state(self, n_hyps: int):
        r_prev = torch.full((self.input_length, 2, 1, n_hyps), LOG_ZERO, dtype=self.dtype, device=self.device)
        r_prev[:, 1] = torch.cumsum(self.x[0, :, :, self.blank], 0).unsqueeze(2)
        return r_prev.view(-1, 2, n_hyps), 0.0

    def __call__(self, y: torch.Tensor, state, scoring_ids: torch.Tensor | None):
        """Scores (n, odim) of each prefix in ``y`` (n, L) extended by each token (LOG_ZERO where not scored),
        minus the prefix's own score, and what :meth:`select` needs."""
        output_length = y.size(1) - 1
        last_ids = y[:, -1].tolist()
        n_bh = y.size(0)
        r_prev, s_prev = state if state is not None else self.initial_state(n_bh)
        if scoring_ids is not None:
            snum = scoring_ids.size(-1)
            scoring_idmap = torch.full((n_bh, self.odim), -1, dtype=torch.long, device=self.device)
            scoring_idmap[torch.arange(n_bh, device=self.device).view(-1, 1), scoring_ids] = torch.arange(
                snum, device=self.device)
            x_ = torch.index_select(self.x.view(2, -1, self.odim), 2, scoring_ids.reshape(-1)).view(2, -1, n_bh, snum)
        else:
            snum, scoring_idmap = self.odim, None
            x_ = self.x.unsqueeze(3).repeat(1, 1, 1, n_bh, 1).view(2, -1, n_bh, snum)
        r = torch.full((self.input_length, 2, n_bh, snum), LOG_ZERO, dtype=self.dtype, device=self.device)
        if output_length == 0:
            r[0, 0] = x_[0, 0]
        r_sum = torch.logsumexp(r_prev, 1)
        log_phi = r_sum.unsqueeze(2).repeat(1, 1, snum)
        positions = scoring_idmap[torch.arange(n_bh, device=self.device), last_ids].tolist() if scoring_idmap is not None else last_ids
        for idx, pos in enumerate(positions):
            if pos >= 0:
                log_phi[:, idx, pos] = r_prev[:, 1, idx]
        start = max(output_length, 1)
        for t in range(start, self.input_length):
            rp = r[t - 1]
            rr = torch.stack([rp[0], log_phi[t - 1], rp[0], rp[1]]).view(2, 2, n_bh, snum)
            r[t] = torch.logsumexp(rr, 1) + x_[:, t]
        log_phi_x = torch.cat((log_phi[0].unsqueeze(0), log_phi[:-1]), dim=0) + x_[0]
        scored = torch.logsumexp(torch.cat((log_phi_x[start:], r[start - 1, 0].unsqueeze(0)), dim=0), dim=0)
        if scoring_ids is not None:
            log_psi = torch.full((n_bh, self.odim), LOG_ZERO, dtype=self.dtype, device=self.device)
            for si in range(n_bh):
                log_psi[si, scoring_ids[si]] = scored[si]
        else:
            log_psi = scored
        for si in range(n_bh):
            log_psi[si, self.eos] = r_sum[self.input_length - 1, si]
        if self.eos != self.blank:
            log_psi[:, self.blank] = LOG_ZERO
        return log_psi - s_prev, (r, log_psi, scoring_idmap)

    @staticmethod
    def select(full_state, hyp_ids: list[int], token_ids: list[int]):
        """The kept hypotheses' states (ESPnet's ``select_state`` for each, stacked as ``batch_score_partial``
        stacks them)."""
        r, log_psi, scoring_idmap = full_state
        columns = [scoring_idmap[h, t] if scoring_idmap is not None else t for h, t in zip(hyp_ids, token_ids)]
        r_new = torch.stack([r[:, :, h, c] for h, c in zip(hyp_ids, columns)], dim=2)
        s_new = torch.stack([log_psi[h, t].expand(log_psi.size(1)) for h, t in zip(hyp_ids, token_ids)])
        return r_new, s_new


def end_detect(ended: list[tuple[torch.Tensor, float]], i: int, rounds: int = 3) -> bool:
    """ESPnet's ``end_detect`` over ended hypotheses ``(yseq, score)``."""
    if not ended:
        return False
    best = sorted(ended, key=lambda hyp: hyp[1], reverse=True)[0][1]
    count = 0
    for m in range(rounds):
        same_length = [hyp for hyp in ended if len(hyp[0]) == i - m]
        if same_length and sorted(same_length, key=lambda hyp: hyp[1], reverse=True)[0][1] - best < END_DETECT_MARGIN:
            count += 1
    return count == rounds


def beam_search(model: Recogniser, encoded: torch.Tensor) -> list[int]:
    """ESPnet's ``BatchBeamSearch`` (decoder and CTC scorers, no length bonus, maxlenratio 0, minlenratio 0) on
    one utterance's encoding (T, D): the best ended hypothesis's token ids without <sos>/<eos>."""
    config = model.config
    n_vocab = config.vocab_size
    sos = eos = n_vocab - 1
    beam, ctc_weight = config.beam_size, config.ctc_weight
    pre_beam_size = int(1.5 * beam)
    pre_beam = pre_beam_size < n_vocab
    device = encoded.device
    with torch.inference_mode():
        memory = encoded.unsqueeze(0)
        sources = [layer.source_keys(memory) for layer in model.decoder.decoders]
        ctc = CtcPrefixScorer(torch.log_softmax(model.ctc.ctc_lo(memory), dim=2)[0], blank=0, eos=eos)
        maxlen = encoded.size(0)
        yseq = torch.tensor([[sos]], device=device)
        score = torch.zeros(1, dtype=encoded.dtype, device=device)
        past, ctc_state = None, None
        ended: list[tuple[torch.Tensor, float, torch.Tensor]] = []
        for i in range(maxlen):
            decoder_scores, new_past = model.decoder.score(yseq, past, sources)
            weighted = torch.zeros(yseq.size(0), n_vocab, dtype=encoded.dtype, device=device)
            weighted += (1.0 - ctc_weight) * decoder_scores
            part_ids = torch.topk(weighted, pre_beam_size, dim=-1)[1] if pre_beam else None
            ctc_scores, ctc_full = ctc(yseq, ctc_state, part_ids)
            weighted += ctc_weight * ctc_scores
            weighted += score.unsqueeze(1)
            top = weighted.view(-1).topk(beam)[1]
            hyp_ids = torch.div(top, n_vocab, rounding_mode="trunc").tolist()
            token_ids = (top % n_vocab).tolist()
            score = torch.stack([weighted[h, t] for h, t in zip(hyp_ids, token_ids)])
            yseq = torch.cat([yseq[hyp_ids], torch.tensor(token_ids, device=device).unsqueeze(1)], dim=1)
            past = [(keys[hyp_ids], values[hyp_ids]) for keys, values in new_past]
            ctc_state = CtcPrefixScorer.select(ctc_full, hyp_ids, token_ids)
            if i == maxlen - 1:
                yseq = torch.cat([yseq, torch.full((yseq.size(0), 1), eos, device=device)], dim=1)
            is_eos = (yseq[:, -1] == eos).tolist()
            for b, finished in enumerate(is_eos):
                if finished:
                    ended.append((yseq[b], float(score[b]), score[b]))
            keep = [b for b, finished in enumerate(is_eos) if not finished]
            if end_detect([(hyp[0], hyp[1]) for hyp in ended], i):
                break
            if not keep:
                break
            yseq, score = yseq[keep], score[keep]
            past = [(keys[keep], values[keep]) for keys, values in past]
            ctc_state = (ctc_state[0][:, :, keep], ctc_state[1][keep])
    if not ended:
        raise NoHypothesisError("the beam search ended without a finished hypothesis")
    best = sorted(ended, key=lambda hyp: hyp[2], reverse=True)[0][0]
    return [token for token in best[1:-1].tolist() if token != 0]


def tokens_to_text(config: RecogniserConfig, token_ids: list[int]) -> str:
    """ESPnet's token ids → text: its ``TokenIDConverter`` then its tokenizer's ``tokens2text``."""
    tokens = [config.token_list[token] for token in token_ids]
    if config.token_type == "bpe":
        return decode_pieces(tokens)
    if config.token_type == "char":
        return "".join(" " if token == config.space_symbol else token for token in tokens)
    return "".join(tokens)


def decode_pieces(pieces: list[str]) -> str:
    """sentencepiece's ``DecodePieces`` for the pieces of an ESPnet token list (ordinary pieces and ``<unk>``):
    ``▁`` becomes a space, the first piece's leading ``▁`` is dropped, the unknown piece reads `` ⁇ ``."""
    text = []
    at_start = True
    for piece in pieces:
        if piece == "<unk>":
            decoded = SENTENCEPIECE_UNKNOWN_SURFACE
        else:
            if at_start and piece.startswith(SENTENCEPIECE_SPACE):
                piece = piece[len(SENTENCEPIECE_SPACE):]
            decoded = piece.replace(SENTENCEPIECE_SPACE, " ")
        at_start = at_start and not decoded
        text.append(decoded)
    return "".join(text)


def recognise(model: Recogniser, audio_16k: np.ndarray) -> str:
    """The phone string the recipe's ``ims_asr.py`` hands on: the best hypothesis's text between
    ``utt_start_token`` and ``utt_end_token``."""
    config = model.config
    text = tokens_to_text(config, beam_search(model, encode(model, audio_16k)))
    return config.utt_start_token + text + config.utt_end_token
