"""Variants of the provisioned embedding model and their speed (issue 23; docs/benchmarks.md).

``python -m tests.bench.embedder_models build OUT``
    writes model folders under OUT, each the provisioned model rebuilt from its own int8
    weights (no other weights are involved), beside symbolic links to its tokenizer files:
    ``fp32`` (the weights dequantized: what onnxruntime runs today after folding constants),
    ``fp32-fused`` (the same with onnxruntime's BERT fusions: BiasGelu, SkipLayerNorm),
    ``dyn-pt`` / ``dyn-pc`` / ``fused-dyn-pc`` (dynamic int8 MatMulInteger, weights per
    tensor / per channel; the per-channel weights are the packaged integers and scales),
    ``nb8-b32-a4`` / ``nb8-b128-a4`` (MatMulNBits, 8-bit weights in blocks of 32 / 128,
    int8 compute with activations quantized per block). Needs ``onnx``, ``onnx_ir`` and
    ``sympy``, which the project does not depend on: install them into a folder outside the
    repository and put it on PYTHONPATH.

``python -m tests.bench.embedder_models speed DIR[@THREADS] ... [--rounds N]``
    times each folder through the service's own embedder (tokenizer, batching, pooling), the
    first one being the baseline, in turn round after round: one short question (p50 of 30
    calls a round) and 64 chunk texts of the book (300-1000 characters) as ingest embeds
    them; wall clock and this process's CPU time, medians over rounds and the median of the
    per-round ratios to the baseline; and the cosine between each folder's vectors and the
    baseline's for the same texts. ``ov:DIR:f32`` / ``ov:DIR:dq`` run DIR's model.onnx on
    OpenVINO instead of onnxruntime (pip's ``openvino``, not a dependency either; ``dq``:
    its dynamic quantization of activations in groups of 32 over the int8 weights).

``python -m tests.bench.embedder_models ragagent-ov f32|dq ARGS...``
    ``ragagent ARGS...`` with the local embedder's onnxruntime session replaced by OpenVINO,
    for ``ingest`` and ``eval`` (the rest of the embedder unchanged).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from service.config import default_model_dir
from service.ingest.loader import load_documents
from service.ingest.pipeline import Ingestor
from service.retrieval.embedders import FastEmbedEmbedder
from tests.bench.common import corpus

QUERY = "Which reinforcement learning algorithm is used to train the walking policy in Isaac Sim?"
OV_MODES: dict[str, dict[str, Any]] = {
    "f32": {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0},
    "dq": {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 32},
}


def _folder(out: Path, name: str, source: Path) -> Path:
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        link = folder / path.name
        if path.name != "model.onnx" and not path.name.startswith(".") and not link.exists():
            link.symlink_to(path.resolve())
    return folder / "model.onnx"


def dequantized(model: Any) -> Any:
    """The model with each ``Cast(int8 weight) * scale`` folded into a float32 weight."""
    from onnx import numpy_helper

    graph = model.graph
    weights = {i.name: i for i in graph.initializer}
    producer = {output: node for node in graph.node for output in node.output}
    folded, dropped, gone = [], set(), []
    for node in graph.node:
        if node.op_type != "Mul":
            continue
        cast = producer.get(node.input[0])
        if cast is None or cast.op_type != "Cast" or cast.input[0] not in weights:
            continue
        if node.input[1] not in weights:
            continue
        ints = numpy_helper.to_array(weights[cast.input[0]])
        scale = numpy_helper.to_array(weights[node.input[1]])
        if ints.dtype != np.int8:
            continue
        value = (ints.astype(np.float32) * scale).astype(np.float32)
        folded.append(numpy_helper.from_array(value, node.output[0]))
        dropped |= {cast.input[0], node.input[1]}
        gone += [cast, node]
    for node in gone:
        graph.node.remove(node)
    kept = [i for i in graph.initializer if i.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(kept + folded)
    return model


def build(out: Path, source: Path) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )
    from onnxruntime.transformers import optimizer

    fp32 = _folder(out, "fp32", source)
    onnx.save(dequantized(onnx.load(source / "model.onnx")), fp32)
    fused = _folder(out, "fp32-fused", source)
    optimizer.optimize_model(
        str(fp32), model_type="bert", num_heads=12, hidden_size=384, opt_level=0
    ).save_model_to_file(str(fused))
    for name, base, per_channel in (
        ("dyn-pt", fp32, False),
        ("dyn-pc", fp32, True),
        ("fused-dyn-pc", fused, True),
    ):
        graph = onnx.load(base).graph
        weights = {i.name for i in graph.initializer}
        matmuls = [n.name for n in graph.node if n.op_type == "MatMul" and n.input[1] in weights]
        quantize_dynamic(
            base,
            _folder(out, name, source),
            per_channel=per_channel,
            nodes_to_quantize=matmuls,
            weight_type=QuantType.QInt8,
        )
    for block in (32, 128):
        config = DefaultWeightOnlyQuantConfig(
            block_size=block,
            is_symmetric=True,
            bits=8,
            accuracy_level=4,
            op_types_to_quantize=("MatMul",),
        )
        quantizer = MatMulNBitsQuantizer(onnx.load(fp32), algo_config=config)
        quantizer.process()
        quantizer.model.save_model_to_file(str(_folder(out, f"nb8-b{block}-a4", source)), False)
    print(f"built under {out}: fp32 fp32-fused dyn-pt dyn-pc fused-dyn-pc nb8-b32-a4 nb8-b128-a4")


class OpenVinoSession:
    """What fastembed asks of an onnxruntime session (get_inputs, run), on OpenVINO."""

    class _Input:
        def __init__(self, name: str) -> None:
            self.name = name

    def __init__(self, path: Path, mode: str, threads: int | None) -> None:
        import openvino

        config: dict[str, Any] = {
            "INFERENCE_NUM_THREADS": threads or 0,
            "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": 1,
            **OV_MODES[mode],
        }
        self._compiled = openvino.Core().compile_model(str(path), "CPU", config)
        self._local = threading.local()  # an infer request serves one call at a time

    def get_inputs(self) -> list[OpenVinoSession._Input]:
        return [self._Input(port.get_any_name()) for port in self._compiled.inputs]

    def run(self, names: object, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self._compiled.create_infer_request()
        return [next(iter(request.infer(feeds).values())).copy()]


def embedder(spec: str) -> FastEmbedEmbedder:
    """``DIR``, ``DIR@THREADS`` or ``ov:DIR:MODE``."""
    if spec.startswith("ov:"):
        _, folder, mode = spec.split(":")
        loaded = FastEmbedEmbedder(Path(folder), model_name="bench", threads=1)
        loaded._model.model.model = OpenVinoSession(Path(folder) / "model.onnx", mode, 1)  # type: ignore[attr-defined]
        return loaded
    folder, _, threads = spec.partition("@")
    return FastEmbedEmbedder(Path(folder), model_name="bench", threads=int(threads or 1))


def speed(specs: list[str], rounds: int) -> None:
    models = {spec: embedder(spec) for spec in specs}
    base = specs[0]
    ingestor = Ingestor(models[base], store=None)  # type: ignore[arg-type]  # prepare() only
    texts = [t for d in load_documents(corpus()[0]) for t in ingestor.prepare(d).embed_texts]
    sized = [t for t in texts if 300 <= len(t) <= 1000]
    batch = [sized[i * len(sized) // 64] for i in range(64)]
    chars = statistics.mean(map(len, batch))
    tokens = statistics.mean(models[base].count_tokens(t) for t in batch)
    print(f"64 chunk texts, {chars:.0f} characters / {tokens:.0f} tokens on average")
    figures: dict[str, dict[str, list[float]]] = {
        spec: {"query": [], "query_cpu": [], "batch": [], "batch_cpu": []} for spec in specs
    }
    for model in models.values():  # warm-up, every shape the batch has
        model._embed_sync([QUERY])
        model._embed_sync(batch)
    for round_ in range(rounds):
        shift = round_ % len(specs)
        for spec in specs[shift:] + specs[:shift]:
            model, row = models[spec], figures[spec]
            wall, cpu = [], []
            for _ in range(30):
                cpu_start, started = time.process_time(), time.perf_counter()
                model._embed_sync([QUERY])
                wall.append(time.perf_counter() - started)
                cpu.append(time.process_time() - cpu_start)
            row["query"].append(statistics.median(wall) * 1000)
            row["query_cpu"].append(statistics.median(cpu) * 1000)
            cpu_start, started = time.process_time(), time.perf_counter()
            model._embed_sync(batch)
            row["batch"].append(64 / (time.perf_counter() - started))
            row["batch_cpu"].append(64 / (time.process_time() - cpu_start))
    reference = np.array(models[base]._embed_sync([*batch, QUERY]))
    print(f"{rounds} rounds; ratios: median of per-round ratios to {base}")
    for spec in specs:
        cosine = (np.array(models[spec]._embed_sync([*batch, QUERY])) * reference).sum(axis=1)
        row = figures[spec]
        cells = []
        for key, unit in (
            ("query", "ms"),
            ("query_cpu", "CPU ms"),
            ("batch", "texts/s"),
            ("batch_cpu", "texts/CPU-s"),
        ):
            pairs = zip(row[key], figures[base][key], strict=True)
            ratio = statistics.median(a / b for a, b in pairs)
            cells.append(f"{key} {statistics.median(row[key]):.2f} {unit} (x{ratio:.2f})")
        cells.append(f"cosine mean {cosine.mean():.4f} min {cosine.min():.4f}")
        print(f"{spec}\n  " + "\n  ".join(cells), flush=True)


def ragagent_ov(mode: str, args: list[str]) -> int:
    from service.cli import main

    load = FastEmbedEmbedder.__init__

    def on_openvino(self: FastEmbedEmbedder, model_dir: Path, **kwargs: Any) -> None:
        load(self, model_dir, **kwargs)
        session = OpenVinoSession(model_dir / "model.onnx", mode, kwargs.get("threads"))
        self._model.model.model = session  # type: ignore[attr-defined]

    FastEmbedEmbedder.__init__ = on_openvino  # type: ignore[method-assign]
    sys.argv = ["ragagent", *args]
    return main()


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.embedder_models")
    commands = parser.add_subparsers(dest="command", required=True)
    built = commands.add_parser("build", help="write the variants' model folders")
    built.add_argument("out", type=Path)
    built.add_argument("--source", type=Path, default=default_model_dir())
    timed = commands.add_parser("speed", help="time model folders in turn")
    timed.add_argument("specs", nargs="+", metavar="DIR[@THREADS]|ov:DIR:MODE")
    timed.add_argument("--rounds", type=int, default=7)
    ov = commands.add_parser("ragagent-ov", help="ragagent with the model on OpenVINO")
    ov.add_argument("mode", choices=sorted(OV_MODES))
    ov.add_argument("args", nargs=argparse.REMAINDER)
    return parser.parse_args()


if __name__ == "__main__":
    options = parse()
    if options.command == "build":
        build(options.out, options.source)
    elif options.command == "speed":
        speed(options.specs, options.rounds)
    else:
        sys.exit(ragagent_ov(options.mode, options.args))
