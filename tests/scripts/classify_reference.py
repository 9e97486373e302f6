#!/usr/bin/env python3
"""Reference-side fixtures for Kestrel's classification task (YOLOv5 v7.0's classify/); the
reference's source tree is $KESTREL_REFERENCE_DIR (default /tmp/yolov5):

  detector OUT.pt          a seeded (torch.manual_seed(0)) yolov5n DetectionModel for COCO's 80
                           classes (default names '0'..'79'), built from the reference's yaml and
                           saved as a stripped checkpoint ('model' in float16, no 'ema'): what a
                           user passes to classify/train.py --model to start from a detector
  train DETECTOR.pt DATA IMG EPOCHS BATCH OUTDIR
                           the reference's own classify/train.py run() on the CPU (seed 0,
                           --pretrained True so the detector's weights are kept, --cutoff 10, no
                           dataloader workers, OUTDIR/train as project/name): it cuts the detector
                           after layer 9, puts a Classify head on it and trains on DATA; it prints
                           where best.pt and last.pt went and the final epoch's line
  predict W.pt SOURCE IMG  the reference's classify/predict.py run() on the CPU: its "image i/N
                           PATH: HxW class p, ..." line for each image (nothing saved)
  val W.pt DATA IMG BATCH  the reference's classify/val.py run() on the CPU with verbose output: the
                           "Class Images top1_acc top5_acc" rows as val.py prints them, then
                           `top1 <repr> top5 <repr>` at full precision
  step W.pt DATA IMG BATCH OUT.safetensors
                           one training step as classify/train.py takes it, for step parity: W.pt's
                           model loaded as train.py loads it (attempt_load(fuse=False), float32,
                           train mode, every parameter trainable), the first BATCH images of DATA's
                           val split in ImageFolder order through classify_transforms(IMG) (the
                           deterministic centre crop), smartCrossEntropyLoss(label_smoothing=0.1),
                           backward, clip_grad_norm_(max_norm=10) and one step of
                           smart_optimizer(model, 'Adam', 0.001, momentum=0.9, decay=5e-5). It
                           writes `images` (float32 NCHW as fed), `labels` (int64), `loss`,
                           `grad.NAME` (each parameter's gradient before clipping), `grad_norm`
                           (the total norm clip_grad_norm_ returned), `after.NAME` (each parameter
                           after the step), `buffers.NAME` (BatchNorm running statistics and
                           counts after the forward) and `before.NAME` (each parameter before the
                           step, i.e. W.pt's float16 widened). To keep the file small, `--no-before`
                           leaves out every `before.NAME` and `--after-max-numel N` every
                           `after.NAME` of a parameter with more than N elements (the metadata
                           names what was left out)
  summarize FULL.safetensors OUT.safetensors
                           a step file's summary for the repository: images, labels, loss and
                           grad_norm as they are, and of every other tensor NAME its `NAME.stats`
                           (sum, norm, largest magnitude) and `NAME.samples` (64 values spread from
                           first to last, or all of a smaller tensor)

albumentations is not installed here, so the reference's ClassificationDataset falls back to its
torchvision transforms for training as well as validation: classify_transforms(IMG), a centre
crop of the largest square resized to IMG (cv2 INTER_LINEAR), BGR to RGB, /255 and ImageNet
normalisation. Training therefore sees no random augmentation (no RandomResizedCrop, flips or
colour jitter). Two more things of the reference's run on this machine: tensorboard is not
installed, so its SummaryWriter is a no-op stub (train.py still traces the model for its graph,
with the detector's modules still in the eval mode attempt_load left them in, which changes no
BatchNorm statistic); and thop is not installed, so the model summary has no GFLOPs.
"""
import logging
import os
import sys
from copy import deepcopy
from datetime import datetime
from pathlib import Path

import torch

REFERENCE = os.environ.get('KESTREL_REFERENCE_DIR', '/tmp/yolov5')
sys.path.insert(0, REFERENCE)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / 'scripts'))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / 'bench' / 'pytorch'))
from safetensors_io import write_safetensors  # noqa: E402
import reference_shims  # noqa: E402
import step_summary  # noqa: E402

# No network in tests: the reference's font download, pip installs and AMP check are answered
# offline (bench/pytorch/reference_shims.py).
reference_shims.apply(REFERENCE)
# The shims' stand-in IPython has no version; matplotlib (train.py's image grids) asks a loaded
# IPython for one and, given 8.24 or later, leaves its GUI backends alone, as outside a notebook.
if not hasattr(sys.modules.get('IPython'), 'version_info') and 'IPython' in sys.modules:
    sys.modules['IPython'].version_info = (8, 24)


class Messages(logging.Handler):
    """Keeps what the reference logs through its LOGGER, to print chosen lines to stdout."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def detector(out):
    from models.yolo import DetectionModel
    torch.manual_seed(0)
    model = DetectionModel(str(Path(REFERENCE) / 'models' / 'yolov5n.yaml'), ch=3, nc=80)
    ckpt = {'epoch': -1, 'best_fitness': None, 'model': deepcopy(model).half(), 'ema': None, 'updates': None,
            'optimizer': None, 'opt': None, 'git': None, 'date': datetime.now().isoformat()}
    torch.save(ckpt, out)


def train(detector_pt, data, imgsz, epochs, batch, outdir):
    reference_shims.stub_tensorboard()  # Debian ships no tensorboard, utils/loggers imports it
    from classify import train as reference_train
    from classify import val as reference_val
    lines = []  # the epoch lines: train.py's progress bar text once validation has filled it in
    validate = reference_val.run

    def run_and_keep_line(*args, **kwargs):
        result = validate(*args, **kwargs)
        if kwargs.get('pbar') is not None:
            lines.append((kwargs['pbar'].desc, result))
        return result

    reference_val.run = run_and_keep_line
    del sys.argv[1:]  # run() parses the command line for its defaults
    opt = reference_train.run(model=str(Path(detector_pt).resolve()), data=str(Path(data).resolve()), imgsz=imgsz,
                              epochs=epochs, batch_size=batch, device='cpu', workers=0, seed=0, pretrained=True,
                              cutoff=10, project=str(Path(outdir).resolve()), name='train', exist_ok=True)
    weights = Path(opt.save_dir) / 'weights'
    print(f'best.pt: {weights / "best.pt"}')
    print(f'last.pt: {weights / "last.pt"}')
    desc, (top1, top5, vloss) = lines[-1]
    print(f'final epoch: {desc}')
    print(f'full precision: top1 {top1!r} top5 {top5!r} val_loss {float(vloss)!r}')


def val(weights, data, imgsz, batch):
    import tempfile
    from classify import val as reference_val
    from utils.general import LOGGER
    messages = Messages()
    LOGGER.addHandler(messages)
    with tempfile.TemporaryDirectory() as save_dir:
        top1, top5, _ = reference_val.run(data=data, weights=weights, batch_size=batch, imgsz=imgsz, device='cpu',
                                          workers=0, verbose=True, project=save_dir, name='reference', exist_ok=True,
                                          half=False)
    LOGGER.removeHandler(messages)
    first = next(i for i, line in enumerate(messages.lines) if line.split()[:2] == ['Class', 'Images'])
    rows = [line for line in messages.lines[first:] if not line.startswith(('Speed:', 'Results saved'))]
    for line in rows:
        print(line)
    print(f'top1 {top1!r} top5 {top5!r}')


def predict(weights, source, imgsz):
    import tempfile
    from PIL import ImageFont
    from classify import predict as reference_predict
    from utils import plots
    from utils.general import LOGGER
    # predict.py draws on every image (saved or not) with Arial, which it would download: offline,
    # PIL's own font stands in (the drawing is not compared).
    plots.check_pil_font = lambda *args, **kwargs: ImageFont.load_default()
    messages = Messages()
    LOGGER.addHandler(messages)
    with tempfile.TemporaryDirectory() as save_dir:
        reference_predict.run(weights=weights, source=source, imgsz=(imgsz, imgsz), device='cpu', nosave=True,
                              project=save_dir, name='reference', exist_ok=True)
    LOGGER.removeHandler(messages)
    for line in messages.lines:
        if line.startswith('image '):
            print(line)


def step(weights, data, imgsz, batch, out, before=True, after_max_numel=None):
    from models.experimental import attempt_load
    from utils.dataloaders import ClassificationDataset
    from utils.general import init_seeds
    from utils.torch_utils import smart_optimizer, smartCrossEntropyLoss
    init_seeds(0, deterministic=True)  # as classify/train.py: deterministic algorithms
    model = attempt_load(weights, device='cpu', fuse=False)  # float32, eval mode
    model.train()
    for p in model.parameters():
        p.requires_grad = True
    val_dir = Path(data) / 'test' if (Path(data) / 'test').exists() else Path(data) / 'val'
    dataset = ClassificationDataset(root=val_dir, augment=False, imgsz=imgsz)  # classify_transforms(imgsz)
    samples = [dataset[i] for i in range(batch)]
    images = torch.stack([s[0] for s in samples])
    labels = torch.tensor([s[1] for s in samples], dtype=torch.int64)

    names = [k for k, _ in model.named_parameters()]
    tensors = {'images': images.clone(), 'labels': labels.clone()}
    if before:
        tensors.update({f'before.{k}': p.detach().clone() for k, p in model.named_parameters()})
    optimizer = smart_optimizer(model, 'Adam', 0.001, momentum=0.9, decay=5e-5)
    criterion = smartCrossEntropyLoss(label_smoothing=0.1)
    loss = criterion(model(images), labels)
    loss.backward()
    tensors.update({f'grad.{k}': p.grad.detach().clone() for k, p in model.named_parameters()})
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
    optimizer.step()
    tensors['loss'] = loss.detach().reshape([]).float()
    tensors['grad_norm'] = grad_norm.detach().reshape([]).float()
    omitted = [k for k, p in model.named_parameters() if p.numel() > (after_max_numel or p.numel())]
    tensors.update({f'after.{k}': p.detach().clone() for k, p in model.named_parameters() if k not in omitted})
    tensors.update({f'buffers.{k}': b.detach().clone() for k, b in model.named_buffers()})
    write_safetensors(out, tensors, {
        'weights': Path(weights).name, 'data': f'{val_dir.name} split, first {batch} images in ImageFolder order',
        'imgsz': imgsz, 'batch': batch, 'loss': 'smartCrossEntropyLoss(label_smoothing=0.1)',
        'clip': 'clip_grad_norm_(max_norm=10.0); grad.* are before clipping',
        'optimizer': "smart_optimizer(model, 'Adam', 0.001, momentum=0.9, decay=5e-5), one step",
        'before': 'included' if before else 'omitted: the float16 weights of the .pt, widened',
        'after_omitted': ','.join(omitted),
        'torch': torch.__version__, 'parameters': len(names)})
    print(f'loss {loss.item()!r} grad_norm {grad_norm.item()!r} labels {labels.tolist()}')
    print(f'wrote {out}: {len(tensors)} tensors, {os.path.getsize(out)} bytes')


if __name__ == '__main__':
    command = sys.argv[1]
    if command == 'detector':
        detector(sys.argv[2])
    elif command == 'train':
        train(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7])
    elif command == 'val':
        val(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif command == 'predict':
        predict(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif command == 'step':
        flags = sys.argv[7:]
        limit = int(flags[flags.index('--after-max-numel') + 1]) if '--after-max-numel' in flags else None
        step(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6],
             before='--no-before' not in flags, after_max_numel=limit)
    elif command == 'summarize':
        # images, labels, loss and grad_norm as they are; stats and samples of everything else
        step_summary.summarize(sys.argv[2], sys.argv[3], keep=('images', 'labels', 'loss', 'grad_norm'))
    else:
        sys.exit(f'unknown command {command}')
