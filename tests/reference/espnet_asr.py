"""Test-only reference for B3's phone recogniser, transcribed (not imported): ESPnet 202511 (Apache-2.0,
espnet/espnet) ``Speech2Text`` as the VoicePrivacy 2024 recipe's ``ims_asr.py`` configures it (beam 15, CTC
weight 0.2, maxlenratio 0, minlenratio 0, nbest 1, batch size 1, so ``BatchBeamSearch``), for the published
model's variant only: ``espnet2/asr/frontend/default.py`` with ``layers/stft.py`` and ``layers/log_mel.py``,
``layers/global_mvn.py``, ``asr/encoder/branchformer_encoder.py`` (merge ``concat``) with ``asr/layers/cgmlp.py``,
``transformer/{attention,embedding,subsampling,decoder_layer}.py``, ``asr/decoder/transformer_decoder.py``,
``nets/scorers/ctc.py`` with ``nets/ctc_prefix_score.py`` (``CTCPrefixScoreTH``), ``nets/beam_search.py`` and
``nets/batch_beam_search.py`` and ``nets/e2e_asr_common.py``'s ``end_detect``, and the text conversion of
``Speech2Text.__call__`` with ``SentencepiecesTokenizer`` (sentencepiece itself). Removed: logging, training
paths (dropout, SpecAugment, stochastic depth, losses), flash attention / SDPA branches, options the published
model does not use. Masks are kept as ESPnet computes them. Checked once against ESPnet 202511 itself (a
throw-away venv, the fixture zip, tiny and full sizes): identical features, encodings and hypotheses.
"""
import math
from typing import Any, Dict, NamedTuple, Union

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence


def make_pad_mask(lengths, xs=None, length_dim=-1):
    lengths = lengths.tolist()
    bs = len(lengths)
    maxlen = int(max(lengths)) if xs is None else xs.size(length_dim)
    seq_range = torch.arange(0, maxlen, dtype=torch.int64)
    seq_range_expand = seq_range.unsqueeze(0).expand(bs, maxlen)
    seq_length_expand = seq_range_expand.new(lengths).unsqueeze(-1)
    mask = seq_range_expand >= seq_length_expand
    if xs is not None:
        if length_dim < 0:
            length_dim = xs.dim() + length_dim
        ind = tuple(slice(None) if i in (0, length_dim) else None for i in range(xs.dim()))
        mask = mask[ind].expand_as(xs)
    return mask


# ---- espnet2/layers/stft.py, log_mel.py, asr/frontend/default.py, layers/global_mvn.py ----

class Frontend(torch.nn.Module):
    def __init__(self, n_fft=512, win_length=None, hop_length=128, n_mels=80):
        super().__init__()
        self.n_fft, self.hop_length = n_fft, hop_length
        self.win_length = win_length if win_length else n_fft
        self.melmat = torch.zeros(n_fft // 2 + 1, n_mels)

    def stft(self, input, ilens):
        window = torch.hann_window(self.win_length, dtype=input.dtype, device=input.device)
        output = torch.stft(input.float(), n_fft=self.n_fft, win_length=self.win_length, hop_length=self.hop_length,
                            center=True, window=window, normalized=False, onesided=True, return_complex=True)
        output = torch.view_as_real(output).type(input.dtype)
        output = output.transpose(1, 2)
        ilens = ilens + 2 * (self.n_fft // 2)
        olens = torch.div(ilens - self.n_fft, self.hop_length, rounding_mode="trunc") + 1
        output.masked_fill_(make_pad_mask(olens, output, 1), 0.0)
        return output, olens

    def forward(self, input, input_lengths):
        input_stft, feats_lens = self.stft(input, input_lengths)
        real, imag = input_stft[..., 0], input_stft[..., 1]
        input_power = real**2 + imag**2
        mel_feat = torch.matmul(input_power, self.melmat)
        mel_feat = torch.clamp(mel_feat, min=1e-10)
        logmel_feat = mel_feat.log()
        logmel_feat = logmel_feat.masked_fill(make_pad_mask(feats_lens, logmel_feat, 1), 0.0)
        return logmel_feat, feats_lens


class GlobalMVN(torch.nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.mean, self.std = mean, std

    def forward(self, x, ilens):
        mean = self.mean.to(x.device, x.dtype)
        std = self.std.to(x.device, x.dtype)
        mask = make_pad_mask(ilens, x, 1)
        x -= mean
        x.masked_fill_(mask, 0.0)
        x /= std
        return x, ilens


# ---- espnet/nets/pytorch_backend/transformer/{layer_norm,embedding,subsampling,attention}.py ----

class LayerNorm(torch.nn.LayerNorm):
    def __init__(self, nout):
        super().__init__(nout, eps=1e-12)


class PositionalEncoding(torch.nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.d_model = d_model
        self.xscale = math.sqrt(self.d_model)
        self.pe = None
        self.extend_pe(torch.tensor(0.0).expand(1, max_len))

    def extend_pe(self, x):
        if self.pe is not None and self.pe.size(1) >= x.size(1):
            return
        pe = torch.zeros(x.size(1), self.d_model)
        position = torch.arange(0, x.size(1), dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, self.d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / self.d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.pe = pe.unsqueeze(0).to(device=x.device, dtype=x.dtype)

    def forward(self, x):
        self.extend_pe(x)
        return x * self.xscale + self.pe[:, : x.size(1)]


class RelPositionalEncoding(torch.nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.d_model = d_model
        self.xscale = math.sqrt(self.d_model)
        self.pe = None
        self.extend_pe(torch.tensor(0.0).expand(1, max_len))

    def extend_pe(self, x):
        if self.pe is not None and self.pe.size(1) >= x.size(1) * 2 - 1:
            return
        pe_positive = torch.zeros(x.size(1), self.d_model)
        pe_negative = torch.zeros(x.size(1), self.d_model)
        position = torch.arange(0, x.size(1), dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, self.d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / self.d_model))
        pe_positive[:, 0::2] = torch.sin(position * div_term)
        pe_positive[:, 1::2] = torch.cos(position * div_term)
        pe_negative[:, 0::2] = torch.sin(-1 * position * div_term)
        pe_negative[:, 1::2] = torch.cos(-1 * position * div_term)
        pe_positive = torch.flip(pe_positive, [0]).unsqueeze(0)
        pe_negative = pe_negative[1:].unsqueeze(0)
        self.pe = torch.cat([pe_positive, pe_negative], dim=1).to(device=x.device, dtype=x.dtype)

    def forward(self, x):
        self.extend_pe(x)
        x = x * self.xscale
        pos_emb = self.pe[:, self.pe.size(1) // 2 - x.size(1) + 1: self.pe.size(1) // 2 + x.size(1)]
        return x, pos_emb


class Conv2dSubsampling(torch.nn.Module):
    def __init__(self, idim, odim):
        super().__init__()
        self.conv = torch.nn.Sequential(torch.nn.Conv2d(1, odim, 3, 2), torch.nn.ReLU(),
                                        torch.nn.Conv2d(odim, odim, 3, 2), torch.nn.ReLU())
        self.out = torch.nn.Sequential(torch.nn.Linear(odim * (((idim - 1) // 2 - 1) // 2), odim),
                                       RelPositionalEncoding(odim))

    def forward(self, x, x_mask):
        x = x.unsqueeze(1)
        x = self.conv(x)
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))
        return x, x_mask[:, :, :-2:2][:, :, :-2:2]


class MultiHeadedAttention(torch.nn.Module):
    def __init__(self, n_head, n_feat):
        super().__init__()
        self.d_k = n_feat // n_head
        self.h = n_head
        self.linear_q = torch.nn.Linear(n_feat, n_feat)
        self.linear_k = torch.nn.Linear(n_feat, n_feat)
        self.linear_v = torch.nn.Linear(n_feat, n_feat)
        self.linear_out = torch.nn.Linear(n_feat, n_feat)

    def forward_qkv(self, query, key, value):
        n_batch = query.size(0)
        q = self.linear_q(query).view(n_batch, -1, self.h, self.d_k)
        k = self.linear_k(key).view(n_batch, -1, self.h, self.d_k)
        v = self.linear_v(value).view(n_batch, -1, self.h, self.d_k)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def forward_attention(self, value, scores, mask):
        n_batch = value.size(0)
        if mask is not None:
            mask = mask.unsqueeze(1).eq(0)
            min_value = torch.finfo(scores.dtype).min
            scores = scores.masked_fill(mask, min_value)
            attn = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
        else:
            attn = torch.softmax(scores, dim=-1)
        x = torch.matmul(attn, value)
        x = x.transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k)
        return self.linear_out(x)

    def forward(self, query, key, value, mask):
        q, k, v = self.forward_qkv(query, key, value)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        return self.forward_attention(v, scores, mask)


class RelPositionMultiHeadedAttention(MultiHeadedAttention):
    def __init__(self, n_head, n_feat):
        super().__init__(n_head, n_feat)
        self.linear_pos = torch.nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = torch.nn.Parameter(torch.zeros(self.h, self.d_k))
        self.pos_bias_v = torch.nn.Parameter(torch.zeros(self.h, self.d_k))

    def rel_shift(self, x):
        zero_pad = torch.zeros((*x.size()[:3], 1), device=x.device, dtype=x.dtype)
        x_padded = torch.cat([zero_pad, x], dim=-1)
        x_padded = x_padded.view(*x.size()[:2], x.size(3) + 1, x.size(2))
        return x_padded[:, :, 1:].view_as(x)[:, :, :, : x.size(-1) // 2 + 1]

    def forward(self, query, key, value, pos_emb, mask):
        q, k, v = self.forward_qkv(query, key, value)
        q = q.transpose(1, 2)
        n_batch_pos = pos_emb.size(0)
        p = self.linear_pos(pos_emb).view(n_batch_pos, -1, self.h, self.d_k)
        p = p.transpose(1, 2)
        q_with_bias_u = (q + self.pos_bias_u).transpose(1, 2)
        q_with_bias_v = (q + self.pos_bias_v).transpose(1, 2)
        matrix_ac = torch.matmul(q_with_bias_u, k.transpose(-2, -1))
        matrix_bd = torch.matmul(q_with_bias_v, p.transpose(-2, -1))
        matrix_bd = self.rel_shift(matrix_bd)
        scores = (matrix_ac + matrix_bd) / math.sqrt(self.d_k)
        return self.forward_attention(v, scores, mask)


# ---- espnet2/asr/layers/cgmlp.py, asr/encoder/branchformer_encoder.py ----

class ConvolutionalSpatialGatingUnit(torch.nn.Module):
    def __init__(self, size, kernel_size):
        super().__init__()
        n_channels = size // 2
        self.norm = LayerNorm(n_channels)
        self.conv = torch.nn.Conv1d(n_channels, n_channels, kernel_size, 1, (kernel_size - 1) // 2, groups=n_channels)

    def forward(self, x):
        x_r, x_g = x.chunk(2, dim=-1)
        x_g = self.norm(x_g)
        x_g = self.conv(x_g.transpose(1, 2)).transpose(1, 2)
        return x_r * x_g


class ConvolutionalGatingMLP(torch.nn.Module):
    def __init__(self, size, linear_units, kernel_size):
        super().__init__()
        self.channel_proj1 = torch.nn.Sequential(torch.nn.Linear(size, linear_units), torch.nn.GELU())
        self.csgu = ConvolutionalSpatialGatingUnit(linear_units, kernel_size)
        self.channel_proj2 = torch.nn.Linear(linear_units // 2, size)

    def forward(self, x, mask):
        xs_pad, pos_emb = x
        xs_pad = self.channel_proj1(xs_pad)
        xs_pad = self.csgu(xs_pad)
        xs_pad = self.channel_proj2(xs_pad)
        return (xs_pad, pos_emb)


class BranchformerEncoderLayer(torch.nn.Module):
    def __init__(self, size, attn, cgmlp):
        super().__init__()
        self.size = size
        self.attn = attn
        self.cgmlp = cgmlp
        self.norm_mha = LayerNorm(size)
        self.norm_mlp = LayerNorm(size)
        self.norm_final = LayerNorm(size)
        self.merge_proj = torch.nn.Linear(size + size, size)

    def forward(self, x_input, mask):
        x, pos_emb = x_input[0], x_input[1]
        x1 = x
        x2 = x
        x1 = self.norm_mha(x1)
        x1 = self.attn(x1, x1, x1, pos_emb, mask)
        x2 = self.norm_mlp(x2)
        x2 = self.cgmlp((x2, pos_emb), mask)[0]
        x = x + self.merge_proj(torch.cat([x1, x2], dim=-1))
        x = self.norm_final(x)
        return (x, pos_emb), mask


class BranchformerEncoder(torch.nn.Module):
    def __init__(self, input_size, output_size, attention_heads, cgmlp_linear_units, cgmlp_conv_kernel, num_blocks):
        super().__init__()
        self.embed = Conv2dSubsampling(input_size, output_size)
        self.encoders = torch.nn.ModuleList(
            BranchformerEncoderLayer(output_size, RelPositionMultiHeadedAttention(attention_heads, output_size),
                                     ConvolutionalGatingMLP(output_size, cgmlp_linear_units, cgmlp_conv_kernel))
            for _ in range(num_blocks))
        self.after_norm = LayerNorm(output_size)

    def forward(self, xs_pad, ilens):
        masks = (~make_pad_mask(ilens)[:, None, :]).to(xs_pad.device)
        if xs_pad.size(1) < 7:
            raise ValueError(f"has {xs_pad.size(1)} frames and is too short for subsampling")
        xs_pad, masks = self.embed(xs_pad, masks)
        for layer in self.encoders:
            xs_pad, masks = layer(xs_pad, masks)
        xs_pad = xs_pad[0]
        xs_pad = self.after_norm(xs_pad)
        olens = masks.squeeze(1).sum(1)
        return xs_pad, olens


# ---- espnet/nets/pytorch_backend/transformer/decoder_layer.py, espnet2/asr/decoder/transformer_decoder.py ----

class PositionwiseFeedForward(torch.nn.Module):
    def __init__(self, idim, hidden_units):
        super().__init__()
        self.w_1 = torch.nn.Linear(idim, hidden_units)
        self.w_2 = torch.nn.Linear(hidden_units, idim)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class DecoderLayer(torch.nn.Module):
    def __init__(self, size, self_attn, src_attn, feed_forward):
        super().__init__()
        self.size = size
        self.self_attn = self_attn
        self.src_attn = src_attn
        self.feed_forward = feed_forward
        self.norm1 = LayerNorm(size)
        self.norm2 = LayerNorm(size)
        self.norm3 = LayerNorm(size)

    def forward(self, tgt, tgt_mask, memory, memory_mask, cache=None):
        residual = tgt
        tgt = self.norm1(tgt)
        if cache is None:
            tgt_q = tgt
            tgt_q_mask = tgt_mask
        else:
            tgt_q = tgt[:, -1:, :]
            residual = residual[:, -1:, :]
            tgt_q_mask = tgt_mask[:, -1:, :]
        x = residual + self.self_attn(tgt_q, tgt, tgt, tgt_q_mask)
        residual = x
        x = self.norm2(x)
        x = residual + self.src_attn(x, memory, memory, memory_mask)
        residual = x
        x = self.norm3(x)
        x = residual + self.feed_forward(x)
        if cache is not None:
            x = torch.cat([cache, x], dim=1)
        return x, tgt_mask, memory, memory_mask


def subsequent_mask(size):
    ret = torch.ones(size, size, dtype=torch.bool)
    return torch.tril(ret, out=ret)


class TransformerDecoder(torch.nn.Module):
    def __init__(self, vocab_size, attention_dim, attention_heads, linear_units, num_blocks):
        super().__init__()
        self.embed = torch.nn.Sequential(torch.nn.Embedding(vocab_size, attention_dim), PositionalEncoding(attention_dim))
        self.decoders = torch.nn.ModuleList(
            DecoderLayer(attention_dim, MultiHeadedAttention(attention_heads, attention_dim),
                         MultiHeadedAttention(attention_heads, attention_dim),
                         PositionwiseFeedForward(attention_dim, linear_units))
            for _ in range(num_blocks))
        self.after_norm = LayerNorm(attention_dim)
        self.output_layer = torch.nn.Linear(attention_dim, vocab_size)

    def forward_one_step(self, tgt, tgt_mask, memory, memory_mask=None, cache=None):
        x = self.embed(tgt)
        if cache is None:
            cache = [None] * len(self.decoders)
        new_cache = []
        for c, decoder in zip(cache, self.decoders):
            x, tgt_mask, memory, memory_mask = decoder(x, tgt_mask, memory, memory_mask, cache=c)
            new_cache.append(x)
        y = self.after_norm(x[:, -1])
        y = torch.log_softmax(self.output_layer(y), dim=-1)
        return y, new_cache

    # BatchScorerInterface
    def batch_init_state(self, x):
        return None

    def select_state(self, state, i, new_id=None):
        return None if state is None else state[i]

    def batch_score(self, ys, states, xs):
        n_batch = len(ys)
        n_layers = len(self.decoders)
        if states[0] is None:
            batch_state = None
        else:
            batch_state = [torch.stack([states[b][i] for b in range(n_batch)]) for i in range(n_layers)]
        ys_mask = subsequent_mask(ys.size(-1)).unsqueeze(0)
        logp, states = self.forward_one_step(ys, ys_mask, xs, cache=batch_state)
        state_list = [[states[i][b] for i in range(n_layers)] for b in range(n_batch)]
        return logp, state_list


class CTC(torch.nn.Module):
    def __init__(self, odim, eprojs):
        super().__init__()
        self.ctc_lo = torch.nn.Linear(eprojs, odim)

    def log_softmax(self, hs_pad):
        return torch.log_softmax(self.ctc_lo(hs_pad), dim=2)


# ---- espnet/nets/ctc_prefix_score.py (CTCPrefixScoreTH, no margin) and nets/scorers/ctc.py ----

class CTCPrefixScoreTH:
    def __init__(self, x, xlens, blank, eos):
        self.logzero = -10000000000.0
        self.blank = blank
        self.eos = eos
        self.batch = x.size(0)
        self.input_length = x.size(1)
        self.odim = x.size(2)
        self.dtype = x.dtype
        self.device = torch.device("cpu")
        for i, length in enumerate(xlens):
            if length < self.input_length:
                x[i, length:, :] = self.logzero
                x[i, length:, blank] = 0
        xn = x.transpose(0, 1)
        xb = xn[:, :, self.blank].unsqueeze(2).expand(-1, -1, self.odim)
        self.x = torch.stack([xn, xb])
        self.end_frames = torch.as_tensor(xlens, device=self.device) - 1
        self.idx_bh = None
        self.idx_b = torch.arange(self.batch, device=self.device)
        self.idx_bo = (self.idx_b * self.odim).unsqueeze(1)

    def __call__(self, y, state, scoring_ids=None):
        output_length = len(y[0]) - 1
        last_ids = [yi[-1] for yi in y]
        n_bh = len(last_ids)
        n_hyps = n_bh // self.batch
        self.scoring_num = scoring_ids.size(-1) if scoring_ids is not None else 0
        if state is None:
            r_prev = torch.full((self.input_length, 2, self.batch, n_hyps), self.logzero, dtype=self.dtype,
                                device=self.device)
            r_prev[:, 1] = torch.cumsum(self.x[0, :, :, self.blank], 0).unsqueeze(2)
            r_prev = r_prev.view(-1, 2, n_bh)
            s_prev = 0.0
            f_min_prev = 0
            f_max_prev = 1
        else:
            r_prev, s_prev, f_min_prev, f_max_prev = state
        if self.scoring_num > 0:
            scoring_idmap = torch.full((n_bh, self.odim), -1, dtype=torch.long, device=self.device)
            snum = self.scoring_num
            if self.idx_bh is None or n_bh > len(self.idx_bh):
                self.idx_bh = torch.arange(n_bh, device=self.device).view(-1, 1)
            scoring_idmap[self.idx_bh[:n_bh], scoring_ids] = torch.arange(snum, device=self.device)
            scoring_idx = (scoring_ids + self.idx_bo.repeat(1, n_hyps).view(-1, 1)).view(-1)
            x_ = torch.index_select(self.x.view(2, -1, self.batch * self.odim), 2, scoring_idx).view(2, -1, n_bh, snum)
        else:
            scoring_ids = None
            scoring_idmap = None
            snum = self.odim
            x_ = self.x.unsqueeze(3).repeat(1, 1, 1, n_hyps, 1).view(2, -1, n_bh, snum)
        r = torch.full((self.input_length, 2, n_bh, snum), self.logzero, dtype=self.dtype, device=self.device)
        if output_length == 0:
            r[0, 0] = x_[0, 0]
        r_sum = torch.logsumexp(r_prev, 1)
        log_phi = r_sum.unsqueeze(2).repeat(1, 1, snum)
        if scoring_ids is not None:
            for idx in range(n_bh):
                pos = scoring_idmap[idx, last_ids[idx]]
                if pos >= 0:
                    log_phi[:, idx, pos] = r_prev[:, 1, idx]
        else:
            for idx in range(n_bh):
                log_phi[:, idx, last_ids[idx]] = r_prev[:, 1, idx]
        f_min = f_max = 0
        start = max(output_length, 1)
        end = self.input_length
        for t in range(start, end):
            rp = r[t - 1]
            rr = torch.stack([rp[0], log_phi[t - 1], rp[0], rp[1]]).view(2, 2, n_bh, snum)
            r[t] = torch.logsumexp(rr, 1) + x_[:, t]
        log_phi_x = torch.cat((log_phi[0].unsqueeze(0), log_phi[:-1]), dim=0) + x_[0]
        if scoring_ids is not None:
            log_psi = torch.full((n_bh, self.odim), self.logzero, dtype=self.dtype, device=self.device)
            log_psi_ = torch.logsumexp(torch.cat((log_phi_x[start:end], r[start - 1, 0].unsqueeze(0)), dim=0), dim=0)
            for si in range(n_bh):
                log_psi[si, scoring_ids[si]] = log_psi_[si]
        else:
            log_psi = torch.logsumexp(torch.cat((log_phi_x[start:end], r[start - 1, 0].unsqueeze(0)), dim=0), dim=0)
        for si in range(n_bh):
            log_psi[si, self.eos] = r_sum[self.end_frames[si // n_hyps], si]
        if self.eos != self.blank:
            log_psi[:, self.blank] = self.logzero
        return (log_psi - s_prev), (r, log_psi, f_min, f_max, scoring_idmap)


class CTCPrefixScorer:
    def __init__(self, ctc, eos):
        self.ctc = ctc
        self.eos = eos
        self.impl = None

    def batch_init_state(self, x):
        logp = self.ctc.log_softmax(x.unsqueeze(0))
        xlen = torch.tensor([logp.size(1)])
        self.impl = CTCPrefixScoreTH(logp, xlen, 0, self.eos)
        return None

    def select_state(self, state, i, new_id=None):
        if type(state) is tuple:
            r, log_psi, f_min, f_max, scoring_idmap = state
            s = log_psi[i, new_id].expand(log_psi.size(1))
            if scoring_idmap is not None:
                return r[:, :, i, scoring_idmap[i, new_id]], s, f_min, f_max
            return r[:, :, i, new_id], s, f_min, f_max
        return None if state is None else state[i]

    def batch_score_partial(self, y, ids, state, x):
        batch_state = ((torch.stack([s[0] for s in state], dim=2), torch.stack([s[1] for s in state]),
                        state[0][2], state[0][3]) if state[0] is not None else None)
        return self.impl(y, batch_state, ids)


# ---- espnet/nets/e2e_asr_common.py, beam_search.py, batch_beam_search.py ----

def end_detect(ended_hyps, i, M=3, D_end=np.log(1 * np.exp(-10))):
    if len(ended_hyps) == 0:
        return False
    count = 0
    best_hyp = sorted(ended_hyps, key=lambda x: x["score"], reverse=True)[0]
    for m in range(M):
        hyp_length = i - m
        hyps_same_length = [x for x in ended_hyps if len(x["yseq"]) == hyp_length]
        if len(hyps_same_length) > 0:
            best_hyp_same_length = sorted(hyps_same_length, key=lambda x: x["score"], reverse=True)[0]
            if best_hyp_same_length["score"] - best_hyp["score"] < D_end:
                count += 1
    return count == M


class Hypothesis(NamedTuple):
    yseq: torch.Tensor
    score: Union[float, torch.Tensor] = 0
    scores: Dict[str, Union[float, torch.Tensor]] = dict()
    states: Dict[str, Any] = dict()

    def asdict(self) -> dict:
        return self._replace(yseq=self.yseq.tolist(), score=float(self.score),
                             scores={k: float(v) for k, v in self.scores.items()})._asdict()


class BatchHypothesis(NamedTuple):
    yseq: torch.Tensor = torch.tensor([])
    score: torch.Tensor = torch.tensor([])
    length: torch.Tensor = torch.tensor([])
    scores: Dict[str, torch.Tensor] = dict()
    states: Dict[str, Dict] = dict()

    def __len__(self) -> int:
        return len(self.length)


class BatchBeamSearch:
    def __init__(self, scorers, weights, beam_size, vocab_size, sos, eos, pre_beam_ratio=1.5):
        self.weights = weights
        self.scorers, self.full_scorers, self.part_scorers = {}, {}, {}
        for k, v in scorers.items():
            if weights.get(k, 0) == 0 or v is None:
                continue
            self.scorers[k] = v
            if isinstance(v, CTCPrefixScorer):
                self.part_scorers[k] = v
            else:
                self.full_scorers[k] = v
        self.sos, self.eos = sos, eos
        self.pre_beam_size = int(pre_beam_ratio * beam_size)
        self.beam_size = beam_size
        self.n_vocab = vocab_size
        self.pre_beam_score_key = "full"
        self.do_pre_beam = self.pre_beam_size < self.n_vocab and len(self.part_scorers) > 0

    def batchfy(self, hyps):
        if len(hyps) == 0:
            return BatchHypothesis()
        return BatchHypothesis(
            yseq=pad_sequence([h.yseq for h in hyps], batch_first=True, padding_value=self.eos),
            length=torch.tensor([len(h.yseq) for h in hyps], dtype=torch.int64),
            score=torch.tensor([h.score for h in hyps]),
            scores={k: torch.tensor([h.scores[k] for h in hyps]) for k in self.scorers},
            states={k: [h.states[k] for h in hyps] for k in self.scorers})

    def _batch_select(self, hyps, ids):
        return BatchHypothesis(
            yseq=hyps.yseq[ids], score=hyps.score[ids], length=hyps.length[ids],
            scores={k: v[ids] for k, v in hyps.scores.items()},
            states={k: [self.scorers[k].select_state(v, i) for i in ids] for k, v in hyps.states.items()})

    def _select(self, hyps, i):
        return Hypothesis(yseq=hyps.yseq[i, : hyps.length[i]], score=hyps.score[i],
                          scores={k: v[i] for k, v in hyps.scores.items()},
                          states={k: self.scorers[k].select_state(v, i) for k, v in hyps.states.items()})

    def unbatchfy(self, batch_hyps):
        return [Hypothesis(yseq=batch_hyps.yseq[i][: batch_hyps.length[i]], score=batch_hyps.score[i],
                           scores={k: batch_hyps.scores[k][i] for k in self.scorers},
                           states={k: v.select_state(batch_hyps.states[k], i) for k, v in self.scorers.items()})
                for i in range(len(batch_hyps.length))]

    def init_hyp(self, x):
        init_states, init_scores = {}, {}
        for k, d in self.scorers.items():
            init_states[k] = d.batch_init_state(x)
            init_scores[k] = 0.0
        return self.batchfy([Hypothesis(score=0.0, scores=init_scores, states=init_states,
                                        yseq=torch.tensor([self.sos], device=x.device))])

    @staticmethod
    def append_token(xs, x):
        x = torch.tensor([x], dtype=xs.dtype, device=xs.device)
        return torch.cat((xs, x))

    @staticmethod
    def merge_scores(prev_scores, next_full_scores, full_idx, next_part_scores, part_idx):
        new_scores = dict()
        for k, v in next_full_scores.items():
            new_scores[k] = prev_scores[k] + v[full_idx]
        for k, v in next_part_scores.items():
            new_scores[k] = prev_scores[k] + v[part_idx]
        return new_scores

    def search(self, running_hyps, x):
        n_batch = len(running_hyps)
        part_ids = None
        weighted_scores = torch.zeros(n_batch, self.n_vocab, dtype=x.dtype, device=x.device)
        scores, states = {}, {}
        for k, d in self.full_scorers.items():
            scores[k], states[k] = d.batch_score(running_hyps.yseq, running_hyps.states[k], x.expand(n_batch, *x.shape))
        for k in self.full_scorers:
            weighted_scores += self.weights[k] * scores[k]
        if self.do_pre_beam:
            part_ids = torch.topk(weighted_scores, self.pre_beam_size, dim=-1)[1]
        part_scores, part_states = {}, {}
        for k, d in self.part_scorers.items():
            part_scores[k], part_states[k] = d.batch_score_partial(running_hyps.yseq, part_ids,
                                                                   running_hyps.states[k], x)
        for k in self.part_scorers:
            weighted_scores += self.weights[k] * part_scores[k]
        weighted_scores += running_hyps.score.to(dtype=x.dtype, device=x.device).unsqueeze(1)
        best_hyps = []
        prev_hyps = self.unbatchfy(running_hyps)
        top_ids = weighted_scores.view(-1).topk(self.beam_size)[1]
        prev_hyp_ids = torch.div(top_ids, self.n_vocab, rounding_mode="trunc")
        new_token_ids = top_ids % self.n_vocab
        for prev_id, new_id in zip(prev_hyp_ids, new_token_ids):
            prev_hyp = prev_hyps[prev_id]
            best_hyps.append(Hypothesis(
                score=weighted_scores[prev_id, new_id],
                yseq=self.append_token(prev_hyp.yseq, new_id),
                scores=self.merge_scores(prev_hyp.scores, {k: v[prev_id] for k, v in scores.items()}, new_id,
                                         {k: v[prev_id] for k, v in part_scores.items()}, new_id),
                states={**{k: self.full_scorers[k].select_state(v, prev_id) for k, v in states.items()},
                        **{k: self.part_scorers[k].select_state(v, prev_id, new_id) for k, v in part_states.items()}}))
        return self.batchfy(best_hyps)

    def post_process(self, i, maxlen, minlen, running_hyps, ended_hyps):
        n_batch = running_hyps.yseq.shape[0]
        if i == maxlen - 1:
            yseq_eos = torch.cat((running_hyps.yseq, torch.full((n_batch, 1), self.eos, dtype=torch.int64)), 1)
            running_hyps.yseq.resize_as_(yseq_eos)
            running_hyps.yseq[:] = yseq_eos
            running_hyps.length[:] = yseq_eos.shape[1]
        is_eos = running_hyps.yseq[torch.arange(n_batch), running_hyps.length - 1] == self.eos
        for b in torch.nonzero(is_eos, as_tuple=False).view(-1):
            hyp = self._select(running_hyps, b)
            if i >= minlen:
                ended_hyps.append(hyp)
        remained_ids = torch.nonzero(is_eos == 0, as_tuple=False).view(-1).cpu()
        return self._batch_select(running_hyps, remained_ids)

    def __call__(self, x, maxlenratio=0.0, minlenratio=0.0):
        maxlen = x.shape[0]
        minlen = int(minlenratio * x.size(0))
        running_hyps = self.init_hyp(x)
        ended_hyps = []
        for i in range(maxlen):
            best = self.search(running_hyps, x)
            running_hyps = self.post_process(i, maxlen, minlen, best, ended_hyps)
            if maxlenratio == 0.0 and end_detect([h.asdict() for h in ended_hyps], i):
                break
            if len(running_hyps) == 0:
                break
        nbest_hyps = sorted(ended_hyps, key=lambda x: x.score, reverse=True)
        if len(nbest_hyps) == 0:
            return []
        return nbest_hyps


# ---- espnet2/bin/asr_inference.py Speech2Text, as ims_asr.py builds and calls it ----

class Speech2Text:
    """Built from the recogniser's config and state dict (the ESPnet zip as :func:`read_asr` reads it)."""

    def __init__(self, config, state, bpe_model: bytes, beam_size=15, ctc_weight=0.2):
        tokens = list(config["token_list"])
        vocab = len(tokens)
        self.frontend = Frontend(config["n_fft"], config["win_length"], config["hop_length"], config["n_mels"])
        self.frontend.melmat = state["frontend.logmel.melmat"]
        self.normalize = GlobalMVN(state["normalize.mean"], state["normalize.std"])
        self.encoder = BranchformerEncoder(config["n_mels"], config["output_size"], config["attention_heads"],
                                           config["cgmlp_linear_units"], config["cgmlp_conv_kernel"],
                                           config["num_blocks"])
        self.decoder = TransformerDecoder(vocab, config["output_size"], config["decoder_attention_heads"],
                                          config["decoder_linear_units"], config["decoder_num_blocks"])
        self.ctc = CTC(vocab, config["output_size"])
        for prefix, module in (("encoder.", self.encoder), ("decoder.", self.decoder), ("ctc.", self.ctc)):
            module.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
            module.eval()
        sos = eos = vocab - 1
        self.beam_search = BatchBeamSearch(
            scorers=dict(decoder=self.decoder, ctc=CTCPrefixScorer(ctc=self.ctc, eos=eos), length_bonus=None),
            weights=dict(decoder=1.0 - ctc_weight, ctc=ctc_weight, lm=0.0, ngram=0.0, length_bonus=0.0),
            beam_size=beam_size, vocab_size=vocab, sos=sos, eos=eos)
        self.token_list = tokens
        import sentencepiece as spm
        self.sp = spm.SentencePieceProcessor(model_proto=bpe_model) if bpe_model is not None else None

    def features(self, speech):
        speech = speech.unsqueeze(0).to(torch.float32)
        lengths = speech.new_full([1], dtype=torch.long, fill_value=speech.size(1))
        feats, feats_lengths = self.frontend(speech, lengths)
        return self.normalize(feats, feats_lengths)

    @torch.no_grad()
    def encode(self, speech):
        feats, feats_lengths = self.features(speech)
        return self.encoder(feats, feats_lengths)[0]

    @torch.no_grad()
    def __call__(self, speech):
        enc = self.encode(speech)
        results = []
        for hyp in self.beam_search(x=enc[0], maxlenratio=0.0, minlenratio=0.0)[:1]:
            token_int = hyp.yseq[1:-1].tolist()
            token_int = list(filter(lambda x: x != 0, token_int))
            token = [self.token_list[i] for i in token_int]
            text = self.sp.DecodePieces(list(token)) if self.sp is not None else None
            results.append((text, token, token_int, hyp))
        return results
