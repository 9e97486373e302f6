#!/usr/bin/env python3
"""Runs the reference's train.py (argv after this script's; `--script val.py` or `detect.py` first
runs that one instead) from its source directory, with a
no-op TensorBoard writer when the tensorboard package is missing (Debian ships none, and the
reference imports it unconditionally). That only takes the reference's event-file logging away,
which if anything favours it in a timing comparison. The run-time shims of
bench/pytorch/reference_shims.py let v7.0 run on PyTorch 2.x, numpy 2.x and offline machines."""
import os
import runpy
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pytorch"))
import reference_shims  # noqa: E402

reference_shims.stub_tensorboard()
reference_shims.apply(os.getcwd())
script, args = "train.py", sys.argv[1:]
if args[:1] == ["--script"]:
    script, args = args[1], args[2:]
sys.argv = [script] + args
runpy.run_path(script, run_name="__main__")
