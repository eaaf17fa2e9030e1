"""Test set-up: the project root is importable (as it is for vLLM's engine via PYTHONPATH)."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the Hub; CI has no access to it
