"""Helpers shared by the layout modules: scaling a released geometry down, keeping a scaled
config valid, and collecting tensor specs.

Each helper is defined here once; the family modules import what they use.
"""

from __future__ import annotations

BF16 = "BF16"


# ---------------------------------------------------------------------------------------------
# Arithmetic and arguments
# ---------------------------------------------------------------------------------------------


def ceil_div(a: int, b: int) -> int:
    """``a / b`` rounded up."""
    return -(-a // b)


def pick(value, default):
    """``value``, or ``default`` where ``value`` is None (an argument the caller left out)."""
    return default if value is None else value


# ---------------------------------------------------------------------------------------------
# Scaling a released geometry
# ---------------------------------------------------------------------------------------------


def scaled(full: int, hidden: int, full_hidden: int, multiple: int = 16) -> int:
    """``full`` scaled by ``hidden / full_hidden``, rounded down to ``multiple`` (at least one
    ``multiple``). Used to derive sizes nobody asked for explicitly when ``hidden_size`` shrinks."""
    if hidden == full_hidden:
        return full
    value = full * hidden // full_hidden
    return max(multiple, value - value % multiple)


def width(real: int, hidden: int, real_hidden: int, multiple: int = 8) -> int:
    """Scale a width with the hidden size (unchanged at full size), rounded *up* to ``multiple``
    (at least one ``multiple``)."""
    if hidden == real_hidden:
        return real
    value = max(multiple, real * hidden // real_hidden)
    return ceil_div(value, multiple) * multiple


def heads_for(hidden: int, full_heads: int, full_hidden: int) -> int:
    """Attention heads for a scaled hidden size: the released count scaled down, then lowered to
    a divisor of ``hidden`` (transformers validates ``hidden_size % num_attention_heads`` even
    for MLA models)."""
    if hidden == full_hidden:
        return full_heads
    want = scaled(full_heads, hidden, full_hidden, 1)
    return max(d for d in range(1, want + 1) if hidden % d == 0)


def kv_heads_for(heads: int, full_kv: int) -> int:
    """Largest divisor of ``heads`` not above the released KV head count (GQA stays valid)."""
    return max(d for d in range(1, min(heads, full_kv) + 1) if heads % d == 0)


def attention_dims(hidden: int, real_hidden: int, heads: int, kv: int, head_dim: int, *,
                   implicit: bool) -> tuple[int, int, int]:
    """(heads, kv_heads, head_dim) for a scaled hidden size (the released values at full size;
    the GQA ratio kept where possible). ``implicit``: the model derives head_dim as
    hidden // heads, so heads * head_dim must equal hidden."""
    if hidden == real_hidden:
        return heads, kv, head_dim
    hd = max(8, min(head_dim, hidden // 4))
    n = max(1, hidden // hd)
    if implicit:
        while hidden % n:
            n -= 1
        hd = hidden // n
    k = max(1, n * kv // heads)
    while n % k:
        k -= 1
    return n, k, hd


# ---------------------------------------------------------------------------------------------
# Keeping a scaled config valid
# ---------------------------------------------------------------------------------------------


def set_existing(config: dict, **values) -> None:
    """Overwrite keys that the released config has, keeping its key order; a key it lacks is a
    bug in the caller, not something to add silently."""
    for key, value in values.items():
        if key not in config:
            raise KeyError(f"config has no {key!r}")
        config[key] = value


def fit_token_ids(config: dict, full_vocab: int, vocab: int) -> None:
    """A scaled vocabulary must still contain the special token ids (transformers rejects a
    ``pad_token_id`` outside the embedding). Ids that no longer fit keep their distance from the
    end of the vocabulary (special tokens sit at the end in these releases); ids that fit stay.
    Only the top-level ``bos``/``eos``/``pad`` ids are touched."""
    if vocab >= full_vocab:
        return

    def fit(i):
        if isinstance(i, list):
            return [fit(x) for x in i]
        if isinstance(i, int) and not isinstance(i, bool) and i >= vocab:
            return max(0, vocab - (full_vocab - i))
        return i

    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if key in config:
            config[key] = fit(config[key])


def fit_token_ids_at_top(config: dict, vocab: int) -> dict:
    """With a scaled-down vocabulary, move special token ids (``*_token_id``,
    ``*_token_index``, at any depth of the config) that fall outside it to distinct ids at its
    top, so the config stays loadable (e.g. ``pad_token_id`` must index the embedding)."""
    big: set[int] = set()

    def walk(d: dict, fn) -> None:
        for key, value in d.items():
            if isinstance(value, dict):
                walk(value, fn)
            elif key.endswith(("_token_id", "_token_index")):
                d[key] = fn(value)

    def collect(value):
        for x in value if isinstance(value, list) else [value]:
            if isinstance(x, int) and x >= vocab:
                big.add(x)
        return value

    walk(config, collect)
    remap = {old: vocab - 1 - i for i, old in enumerate(sorted(big))}
    walk(config, lambda v: [remap.get(x, x) for x in v] if isinstance(v, list) else remap.get(v, v))
    return config


# ---------------------------------------------------------------------------------------------
# Collecting tensor specs
# ---------------------------------------------------------------------------------------------


class Tensors(list):
    """A list of ``(name, dtype, shape)`` tensor specs, in checkpoint order."""

    def add(self, name: str, shape, dtype: str = BF16) -> None:
        """Append one tensor (``shape`` is stored as a tuple of ints)."""
        self.append((name, dtype, tuple(int(d) for d in shape)))

    def attention(self, p: str, hidden: int, heads: int, kv: int, head_dim: int, *,
                  qkv_bias: bool = False, o_bias: bool = False, qk_norm: bool = False,
                  module: str = "self_attn") -> None:
        """``{p}{module}.{q,k,v,o}_proj`` (each weight followed by its bias where asked), then
        the per-head ``q_norm`` / ``k_norm`` where ``qk_norm``."""
        a = f"{p}{module}."
        for proj, out in (("q_proj", heads * head_dim), ("k_proj", kv * head_dim), ("v_proj", kv * head_dim)):
            self.add(a + f"{proj}.weight", (out, hidden))
            if qkv_bias:
                self.add(a + f"{proj}.bias", (out,))
        self.add(a + "o_proj.weight", (hidden, heads * head_dim))
        if o_bias:
            self.add(a + "o_proj.bias", (hidden,))
        if qk_norm:
            self.add(a + "q_norm.weight", (head_dim,))
            self.add(a + "k_norm.weight", (head_dim,))

    def gate_up_down(self, p: str, hidden: int, inter: int, *, bias: bool = False) -> None:
        """A gated MLP: ``{p}gate_proj``, ``{p}up_proj``, ``{p}down_proj`` (each weight followed
        by its bias where ``bias``)."""
        for proj, shape in (("gate_proj", (inter, hidden)), ("up_proj", (inter, hidden)),
                            ("down_proj", (hidden, inter))):
            self.add(f"{p}{proj}.weight", shape)
            if bias:
                self.add(f"{p}{proj}.bias", shape[:1])
