"""The target model: a Llama-style decoder (RMSNorm, RoPE, GQA attention, SwiGLU) with a KV cache,
or, in the hybrid presets, Qwen3.5/3.6's interleave of Gated DeltaNet (linear attention, see
``linear_attention.py``) and attention layers.

Weights come from a seed or from a safetensors file. The KV cache is laid out
``[attention layers, B, S, Hkv, D]``, the layout ``specdec_kernels.commit_accepted_kv`` moves
rows in; a hybrid model's linear layers keep a recurrent and a conv state per request instead.

Seeded weights are random, but shaped so that the model behaves like text does for a drafter:
the next token is mostly decided by the current one (the output layer maps each token's
embedding onto a preferred and a runner-up successor), and attention over the context overturns
that choice at a steady rate. Without that structure a random network's next token would be
unpredictable from anything cheaper than the network itself, and no drafter could be accepted;
with it, a drafter distilled from the model (``drafter.py``) agrees often but not always, and
the model's output still depends on the whole context, so a wrong KV cache changes the output
(which is what the lossless tests rely on).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from . import linear_attention as gdn
from . import tokenizer as tok
from .cli import model_file_of
from .linear_attention import LinearAttentionConfig, RecurrentBatch

# Printable ASCII and newline: the alphabet the seeded model writes in.
_ALPHABET = [10, *range(32, 127)]

# Seeded-weight shape knobs (see the module docstring). The output layer scores the preferred
# successor PREFERRED_LOGIT and the runner-up RUNNER_UP_LOGIT above the rest; attention and MLP
# outputs are scaled so that context overturns the context-free choice for roughly 5-15% of
# greedy tokens (tiny preset; it varies with the seed and the prompt) while one flipped prompt
# byte still changes the continuation.
PREFERRED_LOGIT = 12.0
RUNNER_UP_LOGIT = 10.5
QK_GAIN = 2.0
ATTN_OUT_GAIN = 0.3
MLP_OUT_GAIN = 0.3


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    linear: LinearAttentionConfig | None = None  # hybrid models: the Gated DeltaNet layers

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")
        if isinstance(self.linear, dict):  # read back from JSON
            object.__setattr__(self, "linear", LinearAttentionConfig(**self.linear))

    def is_linear(self, layer: int) -> bool:
        """Whether layer ``layer`` is a Gated DeltaNet layer (never in a non-hybrid model)."""
        return self.linear is not None and self.linear.is_linear(layer)

    @property
    def attention_layers(self) -> list[int]:
        return [i for i in range(self.num_layers) if not self.is_linear(i)]

    @property
    def linear_layers(self) -> list[int]:
        return [i for i in range(self.num_layers) if self.is_linear(i)]


PRESETS = {
    # Small enough that a CPU decode step costs well under a millisecond of arithmetic.
    # Head dim 64: the smallest the Triton verify kernel takes, so tiny runs on CUDA too.
    "tiny": ModelConfig(vocab_size=tok.VOCAB_SIZE, hidden_size=128, num_layers=2, num_heads=4,
                        num_kv_heads=2, head_dim=64, intermediate_size=256),
    # One Llama-3-8B decoder layer's shapes (hidden 4096, 32 query / 8 KV heads of 128, MLP 14336),
    # repeated a few times, so a verify step on a GPU costs what it costs per layer in a real model.
    "8b-layer": ModelConfig(vocab_size=tok.VOCAB_SIZE, hidden_size=4096, num_layers=4, num_heads=32,
                            num_kv_heads=8, head_dim=128, intermediate_size=14336, rope_theta=500000.0),
    # Qwen3.5's pattern at tiny's size: three Gated DeltaNet layers (2 key / 6 value heads of 32,
    # Qwen3.6's 1:3 ratio; conv kernel 4), then one attention layer.
    "tiny-hybrid": ModelConfig(vocab_size=tok.VOCAB_SIZE, hidden_size=128, num_layers=4, num_heads=4,
                               num_kv_heads=2, head_dim=64, intermediate_size=256,
                               linear=LinearAttentionConfig(num_key_heads=2, num_value_heads=6, key_head_dim=32,
                                                            value_head_dim=32)),
    # Qwen3.6-27B's layer shapes (hidden 5120, MLP 17408; linear layers 16 key / 48 value heads of
    # 128; attention 24 query / 4 KV heads of 256), one period of its pattern (3 + 1 layers).
    "27b-hybrid-layers": ModelConfig(vocab_size=tok.VOCAB_SIZE, hidden_size=5120, num_layers=4, num_heads=24,
                                     num_kv_heads=4, head_dim=256, intermediate_size=17408,
                                     rope_theta=10000000.0,
                                     linear=LinearAttentionConfig(num_key_heads=16, num_value_heads=48,
                                                                  key_head_dim=128, value_head_dim=128)),
}

# Hugging Face Llama parameter names, so a byte-level Llama checkpoint loads as is.
_LAYER_NAMES = ("input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
                "mlp.down_proj")
_CONFIG_KEYS = {  # ModelConfig field -> Hugging Face config.json key
    "vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads", "num_kv_heads": "num_key_value_heads", "head_dim": "head_dim",
    "intermediate_size": "intermediate_size", "rope_theta": "rope_theta", "rms_norm_eps": "rms_norm_eps",
}


def _param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    h, d = cfg.hidden_size, cfg.head_dim
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, h), "model.norm.weight": (h,),
              "lm_head.weight": (cfg.vocab_size, h)}
    per_layer = {
        "input_layernorm": (h,), "self_attn.q_proj": (cfg.num_heads * d, h),
        "self_attn.k_proj": (cfg.num_kv_heads * d, h), "self_attn.v_proj": (cfg.num_kv_heads * d, h),
        "self_attn.o_proj": (h, cfg.num_heads * d), "post_attention_layernorm": (h,),
        "mlp.gate_proj": (cfg.intermediate_size, h), "mlp.up_proj": (cfg.intermediate_size, h),
        "mlp.down_proj": (h, cfg.intermediate_size),
    }
    for i in range(cfg.num_layers):
        for name, shape in per_layer.items():
            if cfg.is_linear(i) and name.startswith("self_attn."):
                continue
            shapes[f"model.layers.{i}.{name}.weight"] = shape
        if cfg.is_linear(i):
            shapes.update({f"model.layers.{i}.{name}": shape
                           for name, shape in gdn.param_shapes(cfg.linear, h).items()})
    return shapes


def seeded_weights(cfg: ModelConfig, seed: int, device: torch.device) -> dict[str, Tensor]:
    """Deterministic weights for ``cfg`` from ``seed`` (float32, on ``device``; the same seed
    gives the same weights on the same device type)."""
    if cfg.vocab_size != tok.VOCAB_SIZE:
        raise ValueError(f"seeded weights need the byte vocabulary ({tok.VOCAB_SIZE}), got {cfg.vocab_size}")
    gen = torch.Generator(device=device).manual_seed(seed)
    cpu_gen = torch.Generator().manual_seed(seed)
    h, d, inter = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size

    def randn(*shape: int, scale: float = 1.0) -> Tensor:
        return torch.randn(*shape, generator=gen, device=device).mul_(scale)

    embed = randn(cfg.vocab_size, h)
    weights = {"model.embed_tokens.weight": embed, "model.norm.weight": torch.ones(h, device=device)}
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        weights[p + "input_layernorm.weight"] = torch.ones(h, device=device)
        weights[p + "post_attention_layernorm.weight"] = torch.ones(h, device=device)
        if cfg.is_linear(i):
            weights.update({p + name: t for name, t in gdn.seeded_params(cfg.linear, h, randn, device).items()})
        else:
            weights[p + "self_attn.q_proj.weight"] = randn(cfg.num_heads * d, h, scale=QK_GAIN / math.sqrt(h))
            weights[p + "self_attn.k_proj.weight"] = randn(cfg.num_kv_heads * d, h, scale=1 / math.sqrt(h))
            weights[p + "self_attn.v_proj.weight"] = randn(cfg.num_kv_heads * d, h, scale=1 / math.sqrt(h))
            weights[p + "self_attn.o_proj.weight"] = randn(h, cfg.num_heads * d,
                                                           scale=ATTN_OUT_GAIN / math.sqrt(cfg.num_heads * d))
        weights[p + "mlp.gate_proj.weight"] = randn(inter, h, scale=1 / math.sqrt(h))
        weights[p + "mlp.up_proj.weight"] = randn(inter, h, scale=1 / math.sqrt(h))
        weights[p + "mlp.down_proj.weight"] = randn(h, inter, scale=MLP_OUT_GAIN / math.sqrt(inter))
    # Output layer: token t's embedding points at its preferred successor and, a little less,
    # at its runner-up; both successor maps are single cycles through the alphabet, so the text
    # never settles into a short loop. Special tokens are never preferred.
    alphabet = torch.tensor(_ALPHABET)
    preferred = torch.empty(cfg.vocab_size, dtype=torch.long)
    runner_up = torch.empty(cfg.vocab_size, dtype=torch.long)
    for succ in (preferred, runner_up):
        order = alphabet[torch.randperm(len(alphabet), generator=cpu_gen)]
        succ[:] = order[torch.randint(len(order), (cfg.vocab_size,), generator=cpu_gen)]
        succ[order] = order.roll(-1)
    lm_head = torch.zeros(cfg.vocab_size, h, device=device)
    lm_head.index_add_(0, preferred.to(device), embed, alpha=PREFERRED_LOGIT / h)
    lm_head.index_add_(0, runner_up.to(device), embed, alpha=RUNNER_UP_LOGIT / h)
    weights["lm_head.weight"] = lm_head
    return weights


class TargetModel:
    """The decoder, holding fused weights in the layout its forward passes use.

    Thread use: one scheduler thread drives all forward passes; nothing here locks.
    """

    def __init__(self, cfg: ModelConfig, weights: dict[str, Tensor], device: torch.device,
                 dtype: torch.dtype, max_positions: int) -> None:
        expected = _param_shapes(cfg)
        missing = sorted(set(expected) - set(weights))
        if missing:
            raise ValueError(f"weights lack {len(missing)} tensors, e.g. {missing[:3]}")
        for name, shape in expected.items():
            if tuple(weights[name].shape) != shape:
                raise ValueError(f"{name} has shape {tuple(weights[name].shape)}, config says {shape}")
        self.config = cfg
        self.device = device
        self.dtype = dtype
        self._source = weights

        def w(name: str) -> Tensor:
            return weights[name].to(device=device, dtype=dtype)

        self.embed = w("model.embed_tokens.weight")
        self.final_norm = w("model.norm.weight")
        self.lm_head_t = w("lm_head.weight").t().contiguous()
        self.layers = []
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}."
            layer = {
                "attn_norm": w(p + "input_layernorm.weight"),
                "mlp_norm": w(p + "post_attention_layernorm.weight"),
                # one matmul for gate and up
                "gate_up_t": torch.cat([w(p + "mlp.gate_proj.weight"),
                                        w(p + "mlp.up_proj.weight")]).t().contiguous(),
                "down_t": w(p + "mlp.down_proj.weight").t().contiguous(),
            }
            if cfg.is_linear(i):
                layer.update(gdn.fused_layer(w, p), state_index=cfg.linear_layers.index(i))
            else:
                layer.update({
                    # one matmul for q, k and v
                    "qkv_t": torch.cat([w(p + f"self_attn.{n}_proj.weight") for n in "qkv"]).t().contiguous(),
                    "o_t": w(p + "self_attn.o_proj.weight").t().contiguous(),
                    "cache_index": cfg.attention_layers.index(i),
                })
            self.layers.append(layer)
        half = cfg.head_dim // 2
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(half, dtype=torch.float64, device=device) / half))
        angles = torch.arange(max_positions, dtype=torch.float64, device=device)[:, None] * inv_freq
        angles = torch.cat([angles, angles], dim=-1)
        self.rope_cos = angles.cos().to(dtype)
        sin = angles.sin()
        sin[:, :half] = -sin[:, :half]
        self.rope_sin_signed = sin.to(dtype)
        self.max_positions = max_positions

    # ----------------------------------------------------------------------------- construction

    @classmethod
    def from_seed(cls, cfg: ModelConfig, seed: int, device: torch.device, dtype: torch.dtype,
                  max_positions: int) -> "TargetModel":
        return cls(cfg, seeded_weights(cfg, seed, device), device, dtype, max_positions)

    @classmethod
    def from_safetensors(cls, path: str | Path, device: torch.device, dtype: torch.dtype,
                         max_positions: int, num_layers: int | None = None) -> "TargetModel":
        """Load a file written by :meth:`save_safetensors`, or a directory holding
        ``model.safetensors`` and a Hugging Face Llama ``config.json``."""
        from safetensors import SafetensorError, safe_open

        path = Path(path)
        file = model_file_of(path)
        if not file.is_file():
            raise FileNotFoundError(f"no safetensors file at {file}")
        try:
            with safe_open(str(file), framework="pt") as f:
                meta = f.metadata() or {}
                weights = {k: f.get_tensor(k) for k in f.keys()}
        except SafetensorError as exc:
            raise ValueError(f"{file} is not a safetensors file ({exc})") from None
        if "specdec_config" in meta:
            cfg = ModelConfig(**json.loads(meta["specdec_config"]))
        else:
            config_json = (path if path.is_dir() else path.parent) / "config.json"
            if not config_json.is_file():
                raise FileNotFoundError(f"{file} has no specdec_config metadata and no {config_json}")
            try:
                hf = json.loads(config_json.read_text())
            except ValueError as exc:
                raise ValueError(f"{config_json} is not JSON: {exc}") from None
            required = [v for k, v in _CONFIG_KEYS.items() if k not in ("head_dim", "rope_theta", "rms_norm_eps")]
            missing = [key for key in required if not isinstance(hf, dict) or key not in hf]
            if missing:
                raise ValueError(f"{config_json} lacks {', '.join(missing)} (a Hugging Face Llama config.json "
                                 f"has them)")
            fields = {k: hf[v] for k, v in _CONFIG_KEYS.items() if v in hf}
            fields.setdefault("head_dim", hf["hidden_size"] // hf["num_attention_heads"])
            cfg = ModelConfig(**fields)
            if "lm_head.weight" not in weights and "model.embed_tokens.weight" in weights:  # tied embeddings
                weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
        if num_layers is not None and num_layers != cfg.num_layers:
            if num_layers > cfg.num_layers:
                raise ValueError(f"--num-layers {num_layers} exceeds the {cfg.num_layers} layers in {file}")
            cfg = replace(cfg, num_layers=num_layers)
        return cls(cfg, weights, device, dtype, max_positions)

    def save_safetensors(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        names = _param_shapes(self.config)
        tensors = {n: self._source[n].detach().to("cpu").contiguous() for n in names}
        save_file(tensors, str(path), metadata={"specdec_config": json.dumps(asdict(self.config))})

    @property
    def is_hybrid(self) -> bool:
        return self.config.linear is not None

    # ----------------------------------------------------------------------------- forward passes

    def new_kv_cache(self, batch: int, rows: int) -> tuple[Tensor, Tensor]:
        """K and V caches of the attention layers, [attention layers, B, S, Hkv, D]."""
        cfg = self.config
        shape = (len(cfg.attention_layers), batch, rows, cfg.num_kv_heads, cfg.head_dim)
        return (torch.zeros(shape, device=self.device, dtype=self.dtype),
                torch.zeros(shape, device=self.device, dtype=self.dtype))

    def new_recurrent_state(self, batch: int) -> tuple[Tensor, Tensor]:
        """The linear layers' states, zero: recurrent [linear layers, B, Hv, Dk, Dv] float32 and
        conv [linear layers, B, C, K - 1] in the model's dtype (empty for a non-hybrid model)."""
        lin, count = self.config.linear, len(self.config.linear_layers)
        if lin is None:
            return (torch.zeros(0, batch, device=self.device), torch.zeros(0, batch, device=self.device))
        return (torch.zeros(count, batch, lin.num_value_heads, lin.key_head_dim, lin.value_head_dim,
                            device=self.device, dtype=torch.float32),
                torch.zeros(count, batch, lin.conv_channels, lin.conv_kernel - 1, device=self.device, dtype=self.dtype))

    def _rope_tables(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sign-folded sin [B, T, 1, D] at ``positions`` [B, T], shared by all layers."""
        return self.rope_cos[positions].unsqueeze(2), self.rope_sin_signed[positions].unsqueeze(2)

    # The residual stream is kept 2-D, [B*T, hidden]: CPU matmuls and addmm on 2-D operands skip
    # the batched-matmul path, which costs noticeably more at these small shapes.

    def _qkv(self, layer: dict, x: Tensor, shape: tuple[int, int], cos: Tensor,
             sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        cfg = self.config
        h = F.rms_norm(x, (cfg.hidden_size,), layer["attn_norm"], cfg.rms_norm_eps)
        qkv = (h @ layer["qkv_t"]).view(*shape, cfg.num_heads + 2 * cfg.num_kv_heads, cfg.head_dim)
        qk = qkv[:, :, : cfg.num_heads + cfg.num_kv_heads]
        # rotate-half RoPE: x*cos + (-x2, x1)*sin, with the sign folded into the sin table
        qk = qk * cos + qk.roll(cfg.head_dim // 2, dims=-1) * sin
        return qk[:, :, : cfg.num_heads], qk[:, :, cfg.num_heads:], qkv[:, :, cfg.num_heads + cfg.num_kv_heads:]

    def _finish_layer(self, layer: dict, x: Tensor, attn: Tensor) -> Tensor:
        cfg = self.config
        x = torch.addmm(x, attn.reshape(x.shape[0], -1), layer["o_t"])
        h = F.rms_norm(x, (cfg.hidden_size,), layer["mlp_norm"], cfg.rms_norm_eps)
        gate_up = h @ layer["gate_up_t"]
        inter = cfg.intermediate_size
        return torch.addmm(x, F.silu(gate_up[:, :inter]) * gate_up[:, inter:], layer["down_t"])

    def _logits(self, x: Tensor, shape: tuple[int, int]) -> Tensor:
        cfg = self.config
        h = F.rms_norm(x, (cfg.hidden_size,), self.final_norm, cfg.rms_norm_eps)
        return (h @ self.lm_head_t).view(*shape, cfg.vocab_size)

    def prefill(self, tokens: Tensor, k_cache: Tensor | None = None, v_cache: Tensor | None = None,
                state: Tensor | None = None, conv_state: Tensor | None = None,
                kernel_impl: str = "torch") -> Tensor:
        """Causal forward over whole prompts ``tokens`` [B, P] (equal lengths) from position 0.

        Writes the prompt's K/V into rows ``[0, P)`` of ``k_cache``/``v_cache``
        ([attention layers, B, S, Hkv, D]) when given, and a hybrid model's linear-layer states
        after the prompt into ``state``/``conv_state`` (:meth:`new_recurrent_state`'s layout; zero
        states are used and dropped when not given). Returns the logits at every position
        [B, P, V]. Prompt attention is plain causal attention (no tree), so it uses SDPA directly.
        """
        cfg = self.config
        b, p = tokens.shape
        if self.is_hybrid and state is None:
            state, conv_state = self.new_recurrent_state(b)
        cos, sin = self._rope_tables(torch.arange(p, device=self.device).expand(b, p))
        flat = tokens.reshape(-1)
        # a prompt id outside the vocabulary (protocol.OUT_OF_VOCAB, below 0) embeds as zeros
        x = self.embed[flat.clamp(min=0)] * (flat >= 0).unsqueeze(-1).to(self.embed.dtype)
        for i, layer in enumerate(self.layers):
            if "state_index" in layer:
                j = layer["state_index"]
                state[j].zero_()
                conv_state[j].zero_()
                h = F.rms_norm(x, (cfg.hidden_size,), layer["attn_norm"], cfg.rms_norm_eps)
                out = gdn.prefill_chain(layer, cfg.linear, *gdn.project(layer, cfg.linear, h, (b, p)),
                                           state[j], conv_state[j], kernel_impl, cfg.rms_norm_eps)
                x = self._finish_layer(layer, x, out)
                continue
            q, k, v = self._qkv(layer, x, (b, p), cos, sin)
            if k_cache is not None:
                k_cache[layer["cache_index"], :, :p] = k
                v_cache[layer["cache_index"], :, :p] = v
            attn = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  is_causal=True, enable_gqa=True)
            x = self._finish_layer(layer, x, attn.transpose(1, 2))
        return self._logits(x, (b, p))

    def verify(self, tokens: Tensor, depths: Tensor, cache_lens: Tensor, ancestor_mask: Tensor,
               k_cache: Tensor, v_cache: Tensor, kernel_impl: str = "auto",
               host_lens: list[int] | None = None, recurrent: RecurrentBatch | None = None) -> Tensor:
        """One verify forward over a batch of draft trees; returns logits [B, T, V].

        tokens/depths: [B, T] as in ``specdec_kernels.DDTree``; cache_lens: [B] int32 committed
        prefix lengths; k_cache/v_cache: [layers, B, S, Hkv, D]. The tree's K/V rows are written
        at ``[L_b, L_b + T)`` in node order (where the kernels read them and the commit moves
        the accepted ones from); the prefix rows are not touched. ``host_lens``, the same
        lengths as Python ints when the caller has them, saves index tensors for small batches.
        A hybrid model's linear layers read their states from ``recurrent`` (not modified) and
        leave what the commit needs in ``recurrent.saved``.
        """
        from specdec_kernels import tree_verify_attention

        b, t = tokens.shape
        lens = cache_lens.to(torch.int64)
        cos, sin = self._rope_tables(lens[:, None] + depths)
        if host_lens is not None and b <= 2:
            # A slice copy per sequence is several times cheaper than an indexed write here.
            def write(cache: Tensor, rows: Tensor) -> None:
                for j, start in enumerate(host_lens):
                    cache[j, start:start + t] = rows[j]
        else:
            index = (torch.arange(b, device=self.device)[:, None].expand(b, t),
                     lens[:, None] + torch.arange(t, device=self.device))

            def write(cache: Tensor, rows: Tensor) -> None:
                cache[index] = rows
        x = self.embed[tokens.reshape(-1)]
        for layer in self.layers:
            if "state_index" in layer:
                j = layer["state_index"]
                h = F.rms_norm(x, (self.config.hidden_size,), layer["attn_norm"], self.config.rms_norm_eps)
                out, saved = gdn.mix(layer, self.config.linear, *gdn.project(layer, self.config.linear, h, (b, t)),
                                        recurrent.state[j], recurrent.conv_state[j], recurrent.parents,
                                        recurrent.ancestor_mask, kernel_impl, self.config.rms_norm_eps)
                recurrent.saved.append(saved)
                x = self._finish_layer(layer, x, out)
                continue
            i = layer["cache_index"]
            q, k, v = self._qkv(layer, x, (b, t), cos, sin)
            write(k_cache[i], k)
            write(v_cache[i], v)
            attn = tree_verify_attention(q, k_cache[i], v_cache[i], cache_lens, ancestor_mask, impl=kernel_impl)
            x = self._finish_layer(layer, x, attn)
        return self._logits(x, (b, t))

    def context_free_logits(self) -> Tensor:
        """Logits for the token after ``[BOS, t]``, for every token t: [V, V] float32.

        What the model predicts from the current token alone; the drafter is distilled from it.
        """
        v = self.config.vocab_size
        ids = torch.arange(v, device=self.device)
        tokens = torch.stack([torch.full_like(ids, tok.BOS_ID), ids], dim=1)
        return self.prefill(tokens)[:, -1].float()
