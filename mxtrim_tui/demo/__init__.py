"""The bundled demo models: tiny DeepSeek-V3-architecture checkpoints built on demand (the
default BF16 one that vLLM serves, and a block-FP8 one)."""

from .build import (
    DEFAULT_VARIANT,
    DEMO_NAME,
    DEMO_VERSION,
    VARIANTS,
    DemoVariant,
    build_demo,
    demo_model_path,
    ensure_demo_model,
)

__all__ = ["DEFAULT_VARIANT", "DEMO_NAME", "DEMO_VERSION", "VARIANTS", "DemoVariant", "build_demo",
           "demo_model_path", "ensure_demo_model"]
