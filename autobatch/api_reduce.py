"""(placeholder: filled in this session)"""
from __future__ import annotations

__all__: list = []
