"""The bundled demo model: a tiny DeepSeek-V3-architecture checkpoint built on demand."""

from .build import DEMO_NAME, DEMO_VERSION, build_demo, demo_model_path, ensure_demo_model

__all__ = ["DEMO_NAME", "DEMO_VERSION", "build_demo", "demo_model_path", "ensure_demo_model"]
