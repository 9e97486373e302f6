"""Checks an exported YOLOv5 ONNX file with the onnx package: the full checker, strict shape
inference with type checks, and the interface (images -> output0 with the given dims).

usage: check_onnx.py FILE.onnx OUTPUT_DIMS   e.g. "1,6300,85" or "batch,anchors,85"
"""
import sys

import onnx

path, want = sys.argv[1], sys.argv[2].split(",")
model = onnx.load(path)
onnx.checker.check_model(model, full_check=True)
inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
shaped = {v.name for v in inferred.graph.value_info} | {v.name for v in inferred.graph.output}
unshaped = [o for n in inferred.graph.node for o in n.output if o not in shaped]
assert not unshaped, f"shape inference left {len(unshaped)} outputs without a type: {unshaped[:3]}"
(out,) = inferred.graph.output
dims = [d.dim_param or str(d.dim_value) for d in out.type.tensor_type.shape.dim]
assert [i.name for i in inferred.graph.input] == ["images"], inferred.graph.input
assert out.name == "output0" and dims == want, (out.name, dims, want)
meta = {p.key: p.value for p in model.metadata_props}
assert meta["stride"] == "32" and meta["names"].startswith("{0: "), meta
print(f"onnx {onnx.__version__}: {path} passes the checker and shape inference, output0 {dims}")
