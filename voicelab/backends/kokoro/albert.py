"""PL-BERT: an ALBERT encoder over phoneme ids (one transformer layer shared by all 12 steps)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from voicelab.backends.kokoro.config import KokoroDims


class AlbertEmbeddings(nn.Module):
    """Phoneme, position and (single) token-type embeddings, normalised."""

    def __init__(self, n_token: int, dim: int, positions: int) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(n_token, dim)
        self.position_embeddings = nn.Embedding(positions, dim)
        self.token_type_embeddings = nn.Embedding(2, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] -> [B, T, dim]."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.word_embeddings(tokens) + self.position_embeddings(positions)[None]
        x = x + self.token_type_embeddings.weight[0]
        return self.LayerNorm(x)


class AlbertAttention(nn.Module):
    """Multi-head self-attention with its residual and LayerNorm."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        self.dense = nn.Linear(dim, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, dim] -> [B, T, dim] (every row the same length: no padding mask)."""
        b, t, d = x.shape
        split = (b, t, self.heads, d // self.heads)
        q = self.query(x).view(split).transpose(1, 2)
        k = self.key(x).view(split).transpose(1, 2)
        v = self.value(x).view(split).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        return self.LayerNorm(x + self.dense(context))


class AlbertLayer(nn.Module):
    """Attention then a GELU feed-forward, each with a residual and LayerNorm."""

    def __init__(self, dim: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.attention = AlbertAttention(dim, heads)
        self.ffn = nn.Linear(dim, ffn)
        self.ffn_output = nn.Linear(ffn, dim)
        self.full_layer_layer_norm = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention(x)
        h = self.ffn_output(F.gelu(self.ffn(x), approximate="tanh"))
        return self.full_layer_layer_norm(x + h)


class PlBert(nn.Module):
    """ALBERT as Kokoro uses it: tokens [B, T] -> hidden states [B, T, 768]."""

    def __init__(self, dims: KokoroDims) -> None:
        super().__init__()
        self.steps = dims.bert_layers
        self.embeddings = AlbertEmbeddings(dims.n_token, dims.bert_embedding, dims.bert_positions)
        self.embedding_hidden_mapping_in = nn.Linear(dims.bert_embedding, dims.bert_hidden)
        self.layer = AlbertLayer(dims.bert_hidden, dims.bert_heads, dims.bert_ffn)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] -> [B, T, 768]."""
        x = self.embedding_hidden_mapping_in(self.embeddings(tokens))
        for _ in range(self.steps):
            x = self.layer(x)
        return x
