#!/usr/bin/env python3
"""Runs the reference's train.py (argv after this script's) from its source directory, with a
no-op TensorBoard writer when the tensorboard package is missing (Debian ships none, and the
reference imports it unconditionally). That only takes the reference's event-file logging away,
which if anything favours it in a timing comparison."""
import runpy
import sys
import types

try:
    import tensorboard  # noqa: F401
except ImportError:
    stub = types.ModuleType("torch.utils.tensorboard")

    class SummaryWriter:
        def __init__(self, *args, **kwargs):
            pass

        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    stub.SummaryWriter = SummaryWriter
    sys.modules["torch.utils.tensorboard"] = stub

sys.path.insert(0, ".")
sys.argv = ["train.py"] + sys.argv[1:]
runpy.run_path("train.py", run_name="__main__")
