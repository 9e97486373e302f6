#!/usr/bin/env python3
"""Reference-side helpers for tests/scripts/converters_test.cpp; the reference's source tree
(YOLOv5 v7.0) is $KESTREL_REFERENCE_DIR (default /tmp/yolov5):

  make OUT.pt              a checkpoint as the reference's train.py saves one: 'model' and 'ema'
                           (different weights, random BN statistics) in float16, a yolov5n with 3
                           named classes, built from the reference's yaml with a fixed seed
  compare A.pt B.pt        A's weights (its 'ema', else 'model') against B's 'model', bit for bit,
                           with the class count and names; exit 1 naming every difference
  weights A.pt B.st PREFIX A's weights against the tensors under PREFIX of safetensors B,
                           bit for bit after A's float16 is widened to B's dtype
  val W.pt DATA IMG BATCH CONF DIR [augment]
                           the reference's val.py run() on the CPU (with --augment when asked), with its NMS wall-clock cut-off
                           (0.5 s + 0.05 s per image of a batch, after which it drops the rest of
                           the batch) switched off, so that its numbers do not depend on the
                           machine's speed; it prints the "all" row as val.py does
  train_resume DATA CFG IMG BATCH EPOCHS KEEP OUT
                           a run, and train.py --resume of its last.pt after epoch KEEP
  train_trajectory DATA OUT IMAGES EPOCHS STOP MORE [detect|segment]
                           IMAGES images in one batch, no augmentation: a run from OUT/init.pt
                           stopped after epoch STOP, resumed by (segment/)train.py for MORE epochs
                           (OUT/reference) and left for Kestrel (OUT/kestrel)
"""
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
from safetensors_io import read_safetensors  # noqa: E402
import reference_shims  # noqa: E402

# No network in tests: the reference's font download, pip installs and AMP check are answered
# offline (bench/pytorch/reference_shims.py).
reference_shims.apply(REFERENCE)

NAMES = {0: 'heron', 1: 'kestrel', 2: 'owl'}


def make(out):
    from models.yolo import DetectionModel
    torch.manual_seed(0)
    model = DetectionModel(str(Path(REFERENCE) / 'models' / 'yolov5n.yaml'), ch=3, nc=len(NAMES))
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.num_batches_tracked.fill_(1234)
    model.nc, model.names = len(NAMES), NAMES
    ema = deepcopy(model)
    with torch.no_grad():
        for p in ema.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    ckpt = {'epoch': 4, 'best_fitness': 0.25, 'model': deepcopy(model).half(), 'ema': deepcopy(ema).half(),
            'updates': 40, 'optimizer': torch.optim.SGD(model.parameters(), lr=0.01).state_dict(),
            'opt': {'epochs': 5}, 'git': None, 'date': datetime.now().isoformat()}
    torch.save(ckpt, out)


def load(path):
    try:
        return torch.load(path, map_location='cpu', weights_only=False)
    except TypeError:  # PyTorch < 1.13 has no weights_only
        return torch.load(path, map_location='cpu')


def weights_of(path):
    ckpt = load(path)
    return ckpt.get('ema') or ckpt['model']


def compare(a_path, b_path):
    a = weights_of(a_path)
    b = load(b_path)
    problems = []
    if b.get('optimizer') is not None or b.get('ema') is not None:
        problems.append(f'{b_path} keeps an optimizer or EMA')
    model = b['model']
    if type(model).__name__ != 'DetectionModel' or type(model).__module__ != 'models.yolo':
        problems.append(f'{b_path}: model is {type(model).__module__}.{type(model).__name__}')
    sa, sb = a.state_dict(), model.state_dict()
    if list(sa) != list(sb):
        problems.append(f'names differ: {sorted(set(sa) ^ set(sb))[:10]}')
    for k in sa:
        if k in sb and (sa[k].dtype != sb[k].dtype or sa[k].shape != sb[k].shape or not torch.equal(sa[k], sb[k])):
            problems.append(f'{k}: {sa[k].dtype} {list(sa[k].shape)} vs {sb[k].dtype} {list(sb[k].shape)}')
    if dict(enumerate(a.names.values() if isinstance(a.names, dict) else a.names)) != model.names:
        problems.append(f'names {a.names} vs {model.names}')
    if a.nc != model.nc or model.yaml['nc'] != a.nc:
        problems.append(f'nc {a.nc} vs {model.nc} (yaml {model.yaml["nc"]})')
    for p in problems:
        print(p)
    print(f'compared {len(sa)} tensors: {len(problems)} differences')
    sys.exit(1 if problems else 0)


def against_safetensors(a_path, st_path, prefix):
    sa = weights_of(a_path).state_dict()
    tensors, _ = read_safetensors(st_path)
    problems = []
    for k, v in sa.items():
        t = tensors.get(prefix + k)
        if t is None or t.shape != v.shape or not torch.equal(v.to(t.dtype), t):
            problems.append(k)
    print(f'compared {len(sa)} tensors: {len(problems)} differences {problems[:10]}')
    sys.exit(1 if problems else 0)


def val(weights, data, imgsz, batch, conf, save_dir, augment=False):
    import types
    import time
    import utils.general
    # NMS reads the clock through utils.general's `time`; a clock that stands still never runs out.
    utils.general.time = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith('_')})
    utils.general.time.time = lambda: 0.0
    import val as reference_val
    (mp, mr, map50, map5095, *_), _, _ = reference_val.run(
        data=data, weights=weights, imgsz=imgsz, batch_size=batch, conf_thres=conf, iou_thres=0.6, device='cpu',
        workers=2, project=save_dir, name='reference', exist_ok=True, half=False, augment=augment)
    print(f'full precision: P {mp!r} R {mr!r} mAP50 {map50!r} mAP50-95 {map5095!r}')


def train_resume(data, cfg, imgsz, batch, epochs, keep, out):
    import shutil
    reference_shims.stub_tensorboard()  # Debian ships no tensorboard, train.py imports it
    import train as reference_train
    from utils.callbacks import Callbacks
    out = Path(out).resolve()
    kept = out / f'last_epoch{keep}.pt'

    def on_model_save(last, epoch, final_epoch, best_fitness, fi):
        if epoch == keep:
            shutil.copy(last, kept)

    callbacks = Callbacks()
    callbacks.register_action('on_model_save', callback=on_model_save)
    os.chdir(REFERENCE)
    opt = reference_train.parse_opt(True)
    for k, v in dict(data=data, cfg=cfg, weights='', imgsz=imgsz, batch_size=batch, epochs=epochs, device='cpu',
                     workers=2, seed=0, project=str(out), name='full', exist_ok=True).items():
        setattr(opt, k, v)
    reference_train.main(opt, callbacks)

    full, resume = out / 'full', out / 'resume'
    shutil.rmtree(resume, ignore_errors=True)
    (resume / 'weights').mkdir(parents=True)
    shutil.copy(full / 'hyp.yaml', resume / 'hyp.yaml')
    (resume / 'opt.yaml').write_text(
        ''.join(f'save_dir: {resume}\n' if line.startswith('save_dir:') else line
                for line in (full / 'opt.yaml').read_text().splitlines(keepends=True)))
    rows = (full / 'results.csv').read_text().splitlines(keepends=True)
    (resume / 'results.csv').write_text(''.join(rows[:keep + 2]))
    shutil.copy(kept, resume / 'weights' / 'last.pt')
    opt = reference_train.parse_opt(True)
    opt.resume = str(resume / 'weights' / 'last.pt')
    reference_train.main(opt, Callbacks())


def train_trajectory(data_dir, out, images, epochs, stop, more, task='detect'):
    """The first `images` images of coco128 (task 'detect') or coco128-seg ('segment') with no
    augmentation, in one batch (every epoch the same batch): train.py or segment/train.py from
    OUT/init.pt (yolov5n's or yolov5n-seg's initial weights, float32; img 160, seed 0, no val, no
    AutoAnchor) stopped after epoch `stop`; its last.pt copied to OUT/kestrel (for Kestrel's
    --resume) and OUT/reference, where the script's --resume runs `more` epochs further. The
    warmup's accumulation towards 64 images then spans several epochs, so its windows cross epoch
    ends."""
    import importlib
    import shutil
    import yaml
    reference_shims.stub_tensorboard()
    import torch
    segment = task == 'segment'
    reference_train = importlib.import_module('segment.train' if segment else 'train')
    from utils.callbacks import Callbacks
    out = Path(out).resolve()
    sub = out / 'sub'
    (sub / 'images' / 'train2017').mkdir(parents=True)
    (sub / 'labels' / 'train2017').mkdir(parents=True)
    labels = sorted((Path(data_dir) / 'labels' / 'train2017').glob('*.txt'))[:images]
    for label in labels:
        image = Path(data_dir) / 'images' / 'train2017' / (label.stem + '.jpg')
        os.symlink(image, sub / 'images' / 'train2017' / image.name)
        shutil.copy(label, sub / 'labels' / 'train2017' / label.name)
    names = yaml.safe_load(next(Path(data_dir).glob('*.yaml')).read_text())['names']
    (out / 'sub.yaml').write_text(yaml.safe_dump({'path': str(sub), 'train': 'images/train2017',
                                                  'val': 'images/train2017', 'names': names}))
    hyp = yaml.safe_load((Path(REFERENCE) / 'data' / 'hyps' / 'hyp.scratch-low.yaml').read_text())
    for k in ('hsv_h', 'hsv_s', 'hsv_v', 'degrees', 'translate', 'scale', 'shear', 'perspective', 'flipud',
              'fliplr', 'mosaic', 'mixup', 'copy_paste'):
        hyp[k] = 0.0
    (out / 'hyp.yaml').write_text(yaml.safe_dump(hyp, sort_keys=False))

    # The start: the model's initial weights in float32 (not float16 values: train.py rounds them).
    cfg = str(Path(REFERENCE) / 'models' / ('segment/yolov5n-seg.yaml' if segment else 'yolov5n.yaml'))
    from models.yolo import DetectionModel, SegmentationModel
    torch.manual_seed(0)
    model = (SegmentationModel if segment else DetectionModel)(cfg, ch=3, nc=len(names))
    torch.save({'epoch': -1, 'best_fitness': None, 'model': model, 'ema': None, 'updates': None,
                'optimizer': None}, out / 'init.pt')

    # Stops a run once it has saved last.pt after epoch `last_epoch` (segment/train.py runs no
    # callbacks, so this watches torch.save).
    class Stop(Exception):
        pass

    save = torch.save
    stop_at = {'epoch': stop}

    def save_then_stop(obj, f, *args, **kwargs):
        save(obj, f, *args, **kwargs)
        if isinstance(obj, dict) and str(f).endswith('last.pt') and obj.get('epoch', -1) >= stop_at['epoch']:
            raise Stop()

    torch.save = save_then_stop
    os.chdir(REFERENCE)
    opt = reference_train.parse_opt(True)
    for k, v in dict(data=str(out / 'sub.yaml'), cfg=cfg, hyp=str(out / 'hyp.yaml'), weights=str(out / 'init.pt'),
                     imgsz=160, batch_size=images, epochs=epochs, device='cpu', workers=2, seed=0, noval=True,
                     noautoanchor=True, noplots=True, project=str(out), name='start', exist_ok=True).items():
        setattr(opt, k, v)
    try:
        reference_train.main(opt, Callbacks())
    except Stop:
        pass
    start = out / 'start'
    for name in ('kestrel', 'reference'):
        run = out / name
        shutil.copytree(start, run)
        (run / 'opt.yaml').write_text(
            ''.join(f'save_dir: {run}\n' if line.startswith('save_dir:') else line
                    for line in (start / 'opt.yaml').read_text().splitlines(keepends=True)))
    stop_at['epoch'] = stop + more
    opt = reference_train.parse_opt(True)
    opt.resume = str(out / 'reference' / 'weights' / 'last.pt')
    try:
        reference_train.main(opt, Callbacks())
    except Stop:
        pass
    torch.save = save

if __name__ == '__main__':
    command = sys.argv[1]
    if command == 'make':
        make(sys.argv[2])
    elif command == 'compare':
        compare(sys.argv[2], sys.argv[3])
    elif command == 'weights':
        against_safetensors(sys.argv[2], sys.argv[3], sys.argv[4])
    elif command == 'val':
        val(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), sys.argv[7],
            augment=sys.argv[8:] == ['augment'])
    elif command == 'train_resume':
        train_resume(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]),
                     sys.argv[8])
    elif command == 'train_trajectory':
        train_trajectory(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]),
                         *sys.argv[8:9])
    else:
        sys.exit(f'unknown command {command}')
