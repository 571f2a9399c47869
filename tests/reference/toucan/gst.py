"""Test-only reference for B3's style embedding, transcribed (not imported) from the VoicePrivacy 2024 recipe's
vendored IMS-Toucan (DigitalPhonetics/IMS-Toucan, Apache-2.0; ``GST.py`` Copyright 2020 Nagoya University
(Tomoki Hayashi), ``Layers/Attention.py`` written by Shigeki Karita 2019, adapted by Florian Lux 2021):

- ``TrainingInterfaces/Spectrogram_to_Embedding/GST.py``: ``StyleEncoder``, ``ReferenceEncoder``,
  ``StyleTokenLayer``, ``MultiHeadedAttention`` (with the base class's ``forward_qkv``, ``forward_attention`` and
  ``forward`` from ``Layers/Attention.py``; the mask branch, never taken here, left out);
- ``TrainingInterfaces/Spectrogram_to_Embedding/StyleEmbedding.py``: ``StyleEmbedding`` (its constructor takes the
  StyleEncoder's arguments so that tests can build a small one; the recipe's is the default);
and the recipe's glue around them (Voice-Privacy-Challenge-2024, GPL-3.0):
``evaluation/privacy/asv/utils.py`` ``normalize_wave`` (16 kHz input, so no resampling) and
``anonymization/modules/sttts/speaker_embeddings/extraction/embedding_methods/style_embeddings.py``
``StyleEmbeddings.extract_vector``, whose Silero cut (``cut_silence_from_audio``, transcribed in
``tests/reference/silero.py``) is given as the ``cut_silence`` argument; its log-mel is the ``AudioPreprocessor``
transcribed in ``tests/reference/toucan/audio.py``.
"""
import math

import numpy
import numpy as np
import pyloudnorm as pyln
import torch

from .audio import AudioPreprocessor


# ---- Layers/Attention.py ----

class BaseMultiHeadedAttention(torch.nn.Module):

    def forward_qkv(self, query, key, value):
        n_batch = query.size(0)
        q = self.linear_q(query).view(n_batch, -1, self.h, self.d_k)
        k = self.linear_k(key).view(n_batch, -1, self.h, self.d_k)
        v = self.linear_v(value).view(n_batch, -1, self.h, self.d_k)
        q = q.transpose(1, 2)  # (batch, head, time1, d_k)
        k = k.transpose(1, 2)  # (batch, head, time2, d_k)
        v = v.transpose(1, 2)  # (batch, head, time2, d_k)

        return q, k, v

    def forward_attention(self, value, scores, mask):
        n_batch = value.size(0)
        self.attn = torch.softmax(scores, dim=-1)  # (batch, head, time1, time2)

        p_attn = self.dropout(self.attn)
        x = torch.matmul(p_attn, value)  # (batch, head, time1, d_k)
        x = (x.transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k))  # (batch, time1, d_model)

        return self.linear_out(x)  # (batch, time1, d_model)

    def forward(self, query, key, value, mask):
        q, k, v = self.forward_qkv(query, key, value)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        return self.forward_attention(v, scores, mask)


# ---- TrainingInterfaces/Spectrogram_to_Embedding/GST.py ----

class StyleEncoder(torch.nn.Module):

    def __init__(
            self,
            idim: int = 80,
            gst_tokens: int = 10,
            gst_token_dim: int = 128,
            gst_heads: int = 4,
            conv_layers: int = 6,
            conv_chans_list=(32, 32, 64, 64, 128, 128),
            conv_kernel_size: int = 3,
            conv_stride: int = 2,
            gru_layers: int = 1,
            gru_units: int = 128,
            ):
        """Initialize global style encoder module."""
        super(StyleEncoder, self).__init__()

        self.ref_enc = ReferenceEncoder(idim=idim,
                                        conv_layers=conv_layers,
                                        conv_chans_list=conv_chans_list,
                                        conv_kernel_size=conv_kernel_size,
                                        conv_stride=conv_stride,
                                        gru_layers=gru_layers,
                                        gru_units=gru_units, )
        self.stl = StyleTokenLayer(ref_embed_dim=gru_units,
                                   gst_tokens=gst_tokens,
                                   gst_token_dim=gst_token_dim,
                                   gst_heads=gst_heads, )

    def forward(self, speech: torch.Tensor) -> torch.Tensor:
        ref_embs = self.ref_enc(speech)
        style_embs = self.stl(ref_embs)

        return style_embs


class ReferenceEncoder(torch.nn.Module):

    def __init__(
            self,
            idim=80,
            conv_layers: int = 6,
            conv_chans_list=(32, 32, 64, 64, 128, 128),
            conv_kernel_size: int = 3,
            conv_stride: int = 2,
            gru_layers: int = 1,
            gru_units: int = 128,
            ):
        """Initialize reference encoder module."""
        super(ReferenceEncoder, self).__init__()

        # check hyperparameters are valid
        assert conv_kernel_size % 2 == 1, "kernel size must be odd."
        assert (len(conv_chans_list) == conv_layers), "the number of conv layers and length of channels list must be the same."

        convs = []
        padding = (conv_kernel_size - 1) // 2
        for i in range(conv_layers):
            conv_in_chans = 1 if i == 0 else conv_chans_list[i - 1]
            conv_out_chans = conv_chans_list[i]
            convs += [torch.nn.Conv2d(conv_in_chans,
                                      conv_out_chans,
                                      kernel_size=conv_kernel_size,
                                      stride=conv_stride,
                                      padding=padding,
                                      # Do not use bias due to the following batch norm
                                      bias=False, ),
                      torch.nn.BatchNorm2d(conv_out_chans),
                      torch.nn.ReLU(inplace=True), ]
        self.convs = torch.nn.Sequential(*convs)

        self.conv_layers = conv_layers
        self.kernel_size = conv_kernel_size
        self.stride = conv_stride
        self.padding = padding

        # get the number of GRU input units
        gru_in_units = idim
        for i in range(conv_layers):
            gru_in_units = (gru_in_units - conv_kernel_size + 2 * padding) // conv_stride + 1
        gru_in_units *= conv_out_chans
        self.gru = torch.nn.GRU(gru_in_units, gru_units, gru_layers, batch_first=True)

    def forward(self, speech: torch.Tensor) -> torch.Tensor:
        batch_size = speech.size(0)
        xs = speech.unsqueeze(1)  # (B, 1, Lmax, idim)
        hs = self.convs(xs).transpose(1, 2)  # (B, Lmax', conv_out_chans, idim')
        # NOTE(kan-bayashi): We need to care the length?
        time_length = hs.size(1)
        hs = hs.contiguous().view(batch_size, time_length, -1)  # (B, Lmax', gru_units)
        self.gru.flatten_parameters()
        _, ref_embs = self.gru(hs)  # (gru_layers, batch_size, gru_units)
        ref_embs = ref_embs[-1]  # (batch_size, gru_units)

        return ref_embs


class StyleTokenLayer(torch.nn.Module):

    def __init__(
            self,
            ref_embed_dim: int = 128,
            gst_tokens: int = 10,
            gst_token_dim: int = 128,
            gst_heads: int = 4,
            dropout_rate: float = 0.0,
            ):
        """Initialize style token layer module."""
        super(StyleTokenLayer, self).__init__()

        gst_embs = torch.randn(gst_tokens, gst_token_dim // gst_heads)
        self.register_parameter("gst_embs", torch.nn.Parameter(gst_embs))
        self.mha = MultiHeadedAttention(q_dim=ref_embed_dim,
                                        k_dim=gst_token_dim // gst_heads,
                                        v_dim=gst_token_dim // gst_heads,
                                        n_head=gst_heads,
                                        n_feat=gst_token_dim,
                                        dropout_rate=dropout_rate, )

    def forward(self, ref_embs: torch.Tensor) -> torch.Tensor:
        batch_size = ref_embs.size(0)
        # (num_tokens, token_dim) -> (batch_size, num_tokens, token_dim)
        gst_embs = torch.tanh(self.gst_embs).unsqueeze(0).expand(batch_size, -1, -1)
        # NOTE(kan-bayashi): Shoule we apply Tanh?
        ref_embs = ref_embs.unsqueeze(1)  # (batch_size, 1 ,ref_embed_dim)
        style_embs = self.mha(ref_embs, gst_embs, gst_embs, None)

        return style_embs.squeeze(1)


class MultiHeadedAttention(BaseMultiHeadedAttention):
    """Multi head attention module with different input dimension."""

    def __init__(self, q_dim, k_dim, v_dim, n_head, n_feat, dropout_rate=0.0):
        """Initialize multi head attention module."""
        # NOTE(kan-bayashi): Do not use super().__init__() here since we want to
        #   overwrite BaseMultiHeadedAttention.__init__() method.
        torch.nn.Module.__init__(self)
        assert n_feat % n_head == 0
        # We assume d_v always equals d_k
        self.d_k = n_feat // n_head
        self.h = n_head
        self.linear_q = torch.nn.Linear(q_dim, n_feat)
        self.linear_k = torch.nn.Linear(k_dim, n_feat)
        self.linear_v = torch.nn.Linear(v_dim, n_feat)
        self.linear_out = torch.nn.Linear(n_feat, n_feat)
        self.attn = None
        self.dropout = torch.nn.Dropout(p=dropout_rate)


# ---- TrainingInterfaces/Spectrogram_to_Embedding/StyleEmbedding.py ----

class StyleEmbedding(torch.nn.Module):

    def __init__(self, **style_encoder_arguments):
        super().__init__()
        self.gst = StyleEncoder(**style_encoder_arguments)

    def forward(self, batch_of_spectrograms, batch_of_spectrogram_lengths):
        window_size = 256  # Zipf distribution suggests 64 would be best, because GST can actually get confused by padding. But that's too little information
        # on the time axis to accurately learn a style. So instead, we concatenate each spectrogram with itself until we reach at least 256.
        list_of_specs = list()
        for index, spec_length in enumerate(batch_of_spectrogram_lengths):
            spec = batch_of_spectrograms[index][:spec_length]
            current_spec_length = spec_length.cpu().item()
            if current_spec_length < window_size:
                # make it longer
                repeat_factor = math.ceil((window_size * 2) / spec_length)
                spec = spec.repeat((repeat_factor, 1))
                current_spec_length = len(spec)
            if current_spec_length > window_size:
                # take random window
                frames_to_remove = current_spec_length - window_size
                remove_front = numpy.random.randint(low=0, high=frames_to_remove)
                list_of_specs.append(spec[remove_front:remove_front + window_size])
            elif current_spec_length == window_size:
                # take as is
                list_of_specs.append(spec)

        batch_of_spectrograms_unified_length = torch.stack(list_of_specs, dim=0)
        return self.gst(batch_of_spectrograms_unified_length)


# ---- evaluation/privacy/asv/utils.py (Voice-Privacy-Challenge-2024, GPL-3.0) ----

def normalize_wave(wave, sr, device):
    # adapted from IMSToucan/Preprocessing/AudioPreprocessor
    dur = wave.shape[1] / sr
    wave = wave.squeeze().cpu().numpy()

    # normalize loudness
    try:
        meter = pyln.Meter(sr, block_size=min(dur - 0.0001, abs(dur - 0.1)) if dur < 0.4 else 0.4)
        loudness = meter.integrated_loudness(wave)
        loud_normed = pyln.normalize.loudness(wave, loudness, -30.0)
        peak = np.amax(np.abs(loud_normed))
        norm_wave = np.divide(loud_normed, peak)
    except ZeroDivisionError:
        norm_wave = wave

    wave = torch.Tensor(norm_wave).to(device)
    return wave


# ---- speaker_embeddings/extraction/embedding_methods/style_embeddings.py (GPL-3.0) ----

def extract_vector(extractor, audio, cut_silence):
    """``StyleEmbeddings.extract_vector`` at 16 kHz; ``extractor`` a :class:`StyleEmbedding` left in training mode
    as the recipe leaves it; ``cut_silence`` the audio preprocessor's ``cut_silence_from_audio``."""
    audio = cut_silence(audio)
    spec = AudioPreprocessor(input_sr=16000, output_sr=16000).logmelfilterbank(audio, 16000).transpose(0, 1)
    spec_len = torch.LongTensor([len(spec)])
    vector = extractor(spec.unsqueeze(0), spec_len.unsqueeze(0))
    return vector.squeeze().detach()
