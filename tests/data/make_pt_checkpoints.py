#!/usr/bin/env python3
"""Makes the .pt test data of yolo/model/pt_checkpoint with the reference itself (YOLOv5 v7.0 on
PyTorch 1.13, its own classes and functions), and a manifest of every tensor in them:

  yolov5n_synthetic.pt     a yolov5n for Kestrel's synthetic dataset (4 classes, their names), as
                           the reference's strip_optimizer leaves a finished run's best.pt: 'model'
                           is the EMA in float16, no optimizer. Seeded initialisation, BN
                           statistics randomised so that BN folding and detection are not trivial.
  yolov5n_coco80.pt        the same for the 80 COCO classes (names from the reference's
                           data/coco128.yaml): what the released yolov5n.pt holds, in its layout
                           and with seeded values, which a loopback server serves in place of the
                           real download (tests/yolo/cli/download_command_test.cpp).
  tiny_train.pt            a training checkpoint as train.py saves last.pt mid-run, of a tiny model
                           (tests/data/tiny.yaml: yolov5n's rows at depth 0.33, width 0.03125): 'model'
                           and 'ema' in float16, the SGD optimizer's state_dict after two real
                           steps (momentum buffers, three parameter groups), 'updates', 'epoch',
                           'best_fitness' (a numpy array, as the reference's fitness), 'opt'
                           (vars(opt), hyp dict inside) and 'git', 'date'.
  tiny_adam.pt             the same run with --optimizer Adam (exp_avg, exp_avg_sq and step per
                           parameter; betas, eps, weight_decay per group), and micro_adamw.pt
                           (tests/data/micro.yaml) with AdamW; their manifest entries add each
                           moment's CRC-32, every step count, and parameter values after one more
                           step as the reference's resume takes it (smart_optimizer, then
                           load_state_dict) with the gradient 0.5 * p + 0.01.
  fuzz seeds               fuzz/corpus/zip_archive and fuzz/corpus/pickle: a micro model's
                           training checkpoint (tests/data/micro.yaml, a few KB) and its data.pkl,
                           and hostile variants (a compressed copy, a truncated one, pickles
                           naming os.system and builtins.eval); a small deflated dataset archive
                           in coco128.zip's layout and one whose entry climbs out with "..".
  pt_checkpoints.json      per file and tensor (under the names yolo/model/pt_checkpoint gives them:
                           model.<state_dict name>, ema.<name>): dtype, shape and the CRC-32 of its
                           bytes; the files' model yaml, nc and names; the training checkpoint's
                           epoch, updates, best fitness and optimizer groups.

    /usr/bin/python3 tests/data/make_pt_checkpoints.py --yolov5 /tmp/yolov5

Deterministic for a given PyTorch build (CPU, fixed seeds), apart from 'date'.
"""
import argparse
import json
import os
import sys
import zlib
from copy import deepcopy
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAMES = {0: 'circle', 1: 'rectangle', 2: 'triangle', 3: 'cross'}


def randomise_bn(model, gen):
    import torch
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.2)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
                m.num_batches_tracked.fill_(321)


def tensor_manifest(model, prefix):
    out = {}
    for name, t in model.state_dict().items():
        data = t.detach().cpu().contiguous().numpy().tobytes()
        out[prefix + name] = {'dtype': {'torch.float16': 'F16', 'torch.float32': 'F32', 'torch.int64': 'I64'}[str(t.dtype)],
                              'shape': list(t.shape), 'crc32': zlib.crc32(data)}
    return out


def model_manifest(model):
    return {'model_yaml': model.yaml, 'nc': int(model.nc), 'names': [model.names[i] for i in sorted(model.names)]}


def make_stripped(out, names=NAMES, seed=0):
    import torch
    from models.yolo import DetectionModel
    from utils.general import strip_optimizer
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    model = DetectionModel(os.path.join(REFERENCE, 'models', 'yolov5n.yaml'), ch=3, nc=len(names))
    randomise_bn(model, gen)
    model.nc, model.names = len(names), names
    ema = deepcopy(model)
    with torch.no_grad():
        for p in ema.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.01)
    ckpt = {'epoch': 9, 'best_fitness': None, 'model': deepcopy(model).half(), 'ema': deepcopy(ema).half(),
            'updates': 90, 'optimizer': None, 'opt': {'epochs': 10}, 'git': {}, 'date': datetime.now().isoformat()}
    torch.save(ckpt, out)
    strip_optimizer(out)  # the reference's own: model = ema, float16, no optimizer
    m = torch.load(out, map_location='cpu')['model']
    return {'tensors': tensor_manifest(m, 'model.'), **model_manifest(m)}


def coco_names():
    import yaml
    with open(os.path.join(REFERENCE, 'data', 'coco128.yaml')) as f:
        return dict(yaml.safe_load(f)['names'])


def train_two_steps(cfg, optimizer_name, seed):
    """The reference's model of `cfg` (BN statistics randomised from a generator seeded `seed`)
    after two train.py steps on random images: its smart_optimizer with the scratch-low hyp, and
    the EMA. Returns (model, optimizer, ema, hyp)."""
    import torch
    from models.yolo import Model
    from utils.general import check_yaml
    from utils.loss import ComputeLoss
    from utils.torch_utils import ModelEMA, smart_optimizer
    import yaml

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(seed)
    hyp = yaml.safe_load(open(check_yaml(os.path.join(REFERENCE, 'data', 'hyps', 'hyp.scratch-low.yaml'))))
    model = Model(str(HERE / cfg), ch=3, nc=len(NAMES))
    randomise_bn(model, gen)
    model.nc, model.hyp, model.names = len(NAMES), hyp, NAMES
    optimizer = smart_optimizer(model, optimizer_name, hyp['lr0'], hyp['momentum'], hyp['weight_decay'])
    for g in optimizer.param_groups:
        g['initial_lr'] = hyp['lr0']
    ema = ModelEMA(model)
    compute_loss = ComputeLoss(model)
    model.train()
    for step in range(2):
        images = torch.rand((2, 3, 64, 64), generator=gen)
        targets = torch.tensor([[0, 0, 0.5, 0.5, 0.3, 0.4], [1, 3, 0.3, 0.6, 0.2, 0.2]])
        loss, _ = compute_loss(model(images), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        ema.update(model)
    return model, optimizer, ema, hyp


def make_training(out):
    import types

    import numpy as np
    import torch
    # train.py imports TensorBoard's writer when it is imported; only its parse_opt is used here.
    sys.modules.setdefault('torch.utils.tensorboard', types.SimpleNamespace(SummaryWriter=object))
    import train
    from utils.torch_utils import de_parallel

    model, optimizer, ema, hyp = train_two_steps('tiny.yaml', 'SGD', seed=2)

    opt = train.parse_opt(True)
    # data 'synthetic': Kestrel's built-in dataset, so that the resumed run finds its data anywhere
    opt.cfg, opt.data, opt.weights, opt.project = str(HERE / 'tiny.yaml'), 'synthetic', '', 'runs/train'
    # batch 32 (the steps above used 2 images): a resumed epoch of the synthetic set is 10 batches
    opt.hyp, opt.epochs, opt.batch_size, opt.imgsz = hyp.copy(), 3, 32, 64
    opt.save_dir = 'runs/train/exp'
    best_fitness = np.array([0.125])
    ckpt = {'epoch': 1, 'best_fitness': best_fitness, 'model': deepcopy(de_parallel(model)).half(),
            'ema': deepcopy(ema.ema).half(), 'updates': ema.updates, 'optimizer': optimizer.state_dict(),
            'opt': vars(opt), 'git': {'remote': '', 'branch': '', 'commit': ''}, 'date': datetime.now().isoformat()}
    torch.save(ckpt, out)
    ck = torch.load(out, map_location='cpu')
    sd = ck['optimizer']
    # the parameter each state index belongs to, from the live optimizer's groups
    names = {id(p): n for n, p in model.named_parameters()}
    index_names = [names[id(p)] for g in optimizer.param_groups for p in g['params']]
    state = {}
    for index, s in sd['state'].items():
        data = s['momentum_buffer'].contiguous().numpy().tobytes()
        state[index_names[index]] = {'index': index, 'shape': list(s['momentum_buffer'].shape),
                                     'crc32': zlib.crc32(data)}
    groups = [{k: v for k, v in g.items() if k != 'params'} | {'params': g['params']} for g in sd['param_groups']]
    return {'tensors': tensor_manifest(ck['model'], 'model.') | tensor_manifest(ck['ema'], 'ema.'),
            **model_manifest(ck['ema']), 'epoch': ck['epoch'], 'updates': ck['updates'],
            'best_fitness': float(ck['best_fitness'][0]), 'momentum': state, 'param_groups': groups}


def make_adam_training(out, cfg, optimizer_name, next_step_params):
    """train.py's last.pt after two steps with --optimizer Adam or AdamW, and what the reference's
    resume does next: smart_optimizer + load_state_dict on the float16-rounded weights, then one
    step with the gradient 0.5 * p + 0.01 of every parameter (next_step_params: the parameters
    whose values after it are recorded; None: all)."""
    import types

    import numpy as np
    import torch
    sys.modules.setdefault('torch.utils.tensorboard', types.SimpleNamespace(SummaryWriter=object))
    import train
    from models.yolo import Model
    from utils.torch_utils import de_parallel, smart_optimizer

    # train.py's decay for batch 32: hyp['weight_decay'] *= batch_size * accumulate / nbs (32 * 2 / 64)
    model, optimizer, ema, hyp = train_two_steps(cfg, optimizer_name, seed=3)

    opt = train.parse_opt(True)
    opt.cfg, opt.data, opt.weights, opt.project = str(HERE / cfg), 'synthetic', '', 'runs/train'
    opt.hyp, opt.epochs, opt.batch_size, opt.imgsz, opt.optimizer = hyp.copy(), 3, 32, 64, optimizer_name
    opt.save_dir = 'runs/train/exp'
    ckpt = {'epoch': 1, 'best_fitness': np.array([0.0625]), 'model': deepcopy(de_parallel(model)).half(),
            'ema': deepcopy(ema.ema).half(), 'updates': ema.updates, 'optimizer': optimizer.state_dict(),
            'opt': vars(opt), 'git': {'remote': '', 'branch': '', 'commit': ''}, 'date': datetime.now().isoformat()}
    torch.save(ckpt, out)
    ck = torch.load(out, map_location='cpu')
    sd = ck['optimizer']
    names = {id(p): n for n, p in model.named_parameters()}
    index_names = [names[id(p)] for g in optimizer.param_groups for p in g['params']]
    state = {}
    for index, s in sd['state'].items():
        crc = {k: zlib.crc32(s[k].contiguous().numpy().tobytes()) for k in ('exp_avg', 'exp_avg_sq')}
        state[index_names[index]] = {'index': index, 'step': float(s['step']), 'shape': list(s['exp_avg'].shape),
                                     'exp_avg_crc32': crc['exp_avg'], 'exp_avg_sq_crc32': crc['exp_avg_sq']}
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items() if k != 'params'} |
              {'params': len(g['params'])} for g in sd['param_groups']]

    # The reference's resume (train.py + smart_resume), then one step with a known gradient.
    resumed = Model(str(HERE / cfg), ch=3, nc=len(NAMES))
    resumed.load_state_dict(ck['model'].float().state_dict())
    resumed_opt = smart_optimizer(resumed, optimizer_name, hyp['lr0'], hyp['momentum'], hyp['weight_decay'])
    resumed_opt.load_state_dict(ck['optimizer'])
    for p in resumed.parameters():
        p.grad = p.detach() * 0.5 + 0.01
    resumed_opt.step()
    after = {n: [float(v) for v in p.detach().flatten()] for n, p in resumed.named_parameters()
             if next_step_params is None or n in next_step_params}
    return {'tensors': tensor_manifest(ck['model'], 'model.') | tensor_manifest(ck['ema'], 'ema.'),
            **model_manifest(ck['ema']), 'epoch': ck['epoch'], 'updates': ck['updates'],
            'best_fitness': float(ck['best_fitness'][0]), 'optimizer': optimizer_name, 'adam_state': state,
            'param_groups': groups, 'next_step_gradient': '0.5 * p + 0.01', 'next_step': after}


def make_fuzz_seeds():
    import pickle
    import zipfile

    import torch
    from models.yolo import Model
    torch.manual_seed(0)
    model = Model(str(HERE / 'micro.yaml'), ch=3, nc=1)
    model.nc, model.names = 1, {0: 'kestrel'}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    ckpt = {'epoch': 0, 'best_fitness': None, 'model': deepcopy(model).half(), 'ema': deepcopy(model).half(),
            'updates': 1, 'optimizer': optimizer.state_dict(), 'opt': {'epochs': 1}, 'git': {}, 'date': ''}
    zips, pickles = HERE.parents[1] / 'fuzz' / 'corpus' / 'zip_archive', HERE.parents[1] / 'fuzz' / 'corpus' / 'pickle'
    zips.mkdir(parents=True, exist_ok=True)
    pickles.mkdir(parents=True, exist_ok=True)
    seed = zips / 'micro.pt'
    torch.save(ckpt, seed)
    data = seed.read_bytes()
    (zips / 'hostile_truncated.pt').write_bytes(data[:len(data) // 2])
    with zipfile.ZipFile(seed) as src, zipfile.ZipFile(zips / 'hostile_deflated.pt', 'w', zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            dst.writestr(item.filename, src.read(item.filename))
        (pickles / 'micro.pkl').write_bytes(src.read('micro/data.pkl'))

    for module, name in (('os', 'system'), ('builtins', 'eval'), ('posix', 'system')):
        # {'model': module.name('id')} as protocol 2 writes it; written by hand, since pickling
        # the real function would need it imported
        text = (b'\x80\x02}X\x05\x00\x00\x00modelc' + f'{module}\n{name}\n'.encode() +
                b'X\x02\x00\x00\x00id\x85Rs.')
        (pickles / f'hostile_{module}_{name}.pkl').write_bytes(text)
        with zipfile.ZipFile(zips / f'hostile_{module}_{name}.pt', 'w', zipfile.ZIP_STORED) as z:
            z.writestr('evil/data.pkl', text)
            z.writestr('evil/version', '3\n')
    cyclic = []
    cyclic.append(cyclic)
    (pickles / 'cyclic_list.pkl').write_bytes(pickle.dumps(cyclic, protocol=2))


def make_dataset_zip_seeds():
    import zipfile
    zips = HERE.parents[1] / 'fuzz' / 'corpus' / 'zip_archive'
    zips.mkdir(parents=True, exist_ok=True)

    def entry(z, name, data):
        z.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)

    with zipfile.ZipFile(zips / 'dataset_deflated.zip', 'w') as z:
        entry(z, 'coco128/', b'')
        entry(z, 'coco128/labels/train2017/000000000009.txt', b'45 0.479492 0.688771 0.955609 0.5955\n' * 4)
        entry(z, 'coco128/images/train2017/000000000009.jpg', b'\xff\xd8\xff\xe0' + bytes(range(256)) * 2)
        entry(z, 'coco128/README.txt', b'a seed for the dataset archive reader\n')
    with zipfile.ZipFile(zips / 'hostile_zip_slip.zip', 'w') as z:
        entry(z, 'coco128/labels/a.txt', b'0 0.5 0.5 0.1 0.1\n')
        entry(z, '../../evil.txt', b'written outside the folder\n')


def main():
    global REFERENCE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--yolov5', default=os.environ.get('KESTREL_REFERENCE_DIR', '/tmp/yolov5'))
    args = ap.parse_args()
    REFERENCE = os.path.abspath(args.yolov5)
    sys.path.insert(0, REFERENCE)
    os.chdir(REFERENCE)  # the reference resolves its data/ and models/ from here
    sys.argv = sys.argv[:1]
    manifest = {'yolov5n_synthetic.pt': make_stripped(str(HERE / 'yolov5n_synthetic.pt')),
                'yolov5n_coco80.pt': make_stripped(str(HERE / 'yolov5n_coco80.pt'), coco_names(), seed=80),
                'tiny_train.pt': make_training(str(HERE / 'tiny_train.pt'))}

    manifest['tiny_adam.pt'] = make_adam_training(str(HERE / 'tiny_adam.pt'), 'tiny.yaml', 'Adam',
                                                  {'model.0.conv.weight', 'model.24.m.0.bias', 'model.0.bn.weight',
                                                   'model.24.m.2.weight'})
    manifest['micro_adamw.pt'] = make_adam_training(str(HERE / 'micro_adamw.pt'), 'micro.yaml', 'AdamW', None)

    make_fuzz_seeds()
    make_dataset_zip_seeds()
    with open(HERE / 'pt_checkpoints.json', 'w') as f:
        json.dump(manifest, f, indent=1)
        f.write('\n')
    for name in manifest:
        print(f'{name}: {(HERE / name).stat().st_size} bytes, {len(manifest[name]["tensors"])} tensors')


if __name__ == '__main__':
    main()
