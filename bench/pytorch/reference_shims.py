"""Run-time compatibility shims for the reference (ultralytics YOLOv5 v7.0) on today's Python stack.

v7.0 was written for PyTorch 1.x, numpy 1.x and a machine with internet access. On PyTorch 2.x,
numpy 2.x or an offline machine (the lent GPU machines have no network) it stops in places that
have nothing to do with what we measure. `apply(yolov5_dir)` patches those places in memory,
before train.py or the step benchmark imports them; the reference's files are never changed and
nothing of them is copied here. Each shim returns what the reference would compute on a machine
where the original works, so timings and numbers stay the reference's:

- `pkg_resources` (setuptools dropped it): `parse_version` and a `require` that accepts all.
- `IPython` (imported by utils/general.py for notebooks only): an empty module.
- `np.trapz` (removed in numpy 2.x): `np.trapezoid`, the same integral.
- `torch.load` defaults to `weights_only=True` since 2.6, which refuses v7.0's pickled models
  (train.py's strip_optimizer reloads last.pt and best.pt): default it back to False for these
  files, which the reference itself just wrote.
- `torch.cuda.amp.autocast` / `GradScaler`, where a newer PyTorch has removed the aliases.
- `cv2.resize` on OpenCV 5, which refuses images of more than 128 channels where OpenCV 4 took up
  to 512 (segment/val.py's scale_image resizes its (h, w, n) masks of n detections at once): such
  an image is resized 128 channels at a time and put back together, which is what OpenCV 4
  computes (each channel is interpolated on its own).
- Offline: `check_requirements` would run `pip install` for gitpython/thop/ipython and wait on
  the network, `check_git_info` imports gitpython, `check_font` downloads Arial.ttf, and
  `check_amp` falls back to downloading yolov5n.pt when its first check is inconclusive. They
  become: nothing to install, no git info, no font, and AMP on for CUDA (what the check answers
  on a machine with a working AMP and internet).
"""
import functools
import sys
import types

applied = []  # names of the shims that were needed, for the log


def _stub_module(name, **attrs):
    module = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(module, key, value)
    sys.modules[name] = module
    applied.append(name)


def _python_stack():
    try:
        import pkg_resources  # noqa: F401
    except ImportError:
        from packaging.version import parse as parse_version
        _stub_module("pkg_resources", parse_version=parse_version, require=lambda *a, **k: None)
    try:
        import IPython  # noqa: F401
    except ImportError:
        # models/common.py does `from IPython.display import display`: a package with that submodule.
        def display(*args, **kwargs):
            return None

        _stub_module("IPython.display", display=display)
        # matplotlib asks a loaded IPython for its shell: None, as outside a notebook.
        _stub_module("IPython", display=sys.modules["IPython.display"], __path__=[],
                     get_ipython=lambda: None)
        applied.pop()  # one entry for the pair

    import numpy as np
    if not hasattr(np, "trapz"):
        np.trapz = np.trapezoid
        applied.append("np.trapz")

    import inspect

    import torch
    original_load = torch.load

    @functools.wraps(original_load)
    def load(*args, **kwargs):
        kwargs.setdefault("weights_only", False)
        return original_load(*args, **kwargs)

    if "weights_only" in inspect.signature(original_load).parameters:
        torch.load = load
        applied.append("torch.load(weights_only=False)")
    try:
        import cv2
    except ImportError:
        cv2 = None
    if cv2 is not None and int(cv2.__version__.split(".")[0]) >= 5:
        original_resize = cv2.resize

        @functools.wraps(original_resize)
        def resize(src, *args, **kwargs):
            if getattr(src, "ndim", 0) == 3 and src.shape[2] > 128:
                parts = [original_resize(np.ascontiguousarray(src[:, :, i:i + 128]), *args, **kwargs)
                         for i in range(0, src.shape[2], 128)]
                parts = [p[:, :, None] if p.ndim == 2 else p for p in parts]
                return np.concatenate(parts, axis=2)
            return original_resize(src, *args, **kwargs)

        cv2.resize = resize
        applied.append("cv2.resize(> 128 channels)")
    amp = torch.cuda.amp
    if not hasattr(amp, "autocast"):
        amp.autocast = functools.partial(torch.amp.autocast, "cuda")
        applied.append("torch.cuda.amp.autocast")
    if not hasattr(amp, "GradScaler"):
        amp.GradScaler = functools.partial(torch.amp.GradScaler, "cuda")
        applied.append("torch.cuda.amp.GradScaler")


def _offline(yolov5_dir):
    if yolov5_dir not in sys.path:
        sys.path.insert(0, yolov5_dir)
    import utils.general as general

    general.check_requirements = lambda *a, **k: None
    general.check_git_info = lambda *a, **k: {"remote": None, "branch": None, "commit": None}
    general.check_font = lambda *a, **k: None

    def check_amp(model):
        return next(model.parameters()).device.type == "cuda"

    general.check_amp = check_amp
    applied.extend(["check_requirements", "check_git_info", "check_font", "check_amp"])


def stub_tensorboard():
    """A no-op torch.utils.tensorboard.SummaryWriter where the tensorboard package is missing
    (Debian ships none, and train.py imports it unconditionally): only the event files go."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        import types
        stub = types.ModuleType("torch.utils.tensorboard")

        class SummaryWriter:
            def __init__(self, *args, **kwargs):
                pass

            def __getattr__(self, name):
                return lambda *args, **kwargs: None

        stub.SummaryWriter = SummaryWriter
        sys.modules["torch.utils.tensorboard"] = stub


def apply(yolov5_dir):
    """Patches the Python stack, then the reference's network checks; call before importing
    train.py, models or utils from `yolov5_dir`."""
    _python_stack()
    _offline(yolov5_dir)
    print(f"reference_shims: {', '.join(applied)}", file=sys.stderr)
