"""In-process cost of reading and writing one MiniLM request in each protocol, no server.

    python benchmarks/codec.py [--repeats 7] [--no-docs]

The same pre-tokenized sentence as benchmarks/protocols.py, decoded the way the server
decodes it and its 384-float answer encoded, in a tight loop (microseconds per call, the
median of ``--repeats`` timings of 20,000 calls each):

* ``/infer``: the JSON body parsed, its two lists converted to the graph's arrays; the
  answer as ``/infer`` JSON;
* v2 JSON: the tensors decoded and checked; the answer as JSON tensors;
* v2 binary: the body decoded with its header kept from an earlier request (what every
  client that repeats its header gets), and with a header never seen before (another
  ``id`` each time); the answer as a binary tensor.

A tight loop flatters Python code that touches many objects: in the flow of real requests
the same work costs two to three times more (docs/explanation/performance.md). The
throughput that counts is benchmarks/protocols.py's. Results go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from minilm import MODEL, tokens
from protocols import bodies
from run import _machine, write_docs

from servinglib.runtimes._tensors import to_arrays
from servinglib.wire import jsonbytes
from servinglib.wire.strict_json import parse_json
from servinglib.wire.v2 import RequestedOutput, decode_request
from servinglib.wire.v2_response import encode_response

CALLS = 20_000
INT64 = np.dtype(np.int64)


def per_call_us(function: Callable[[], Any], repeats: int) -> float:
    """Median microseconds per call over ``repeats`` timings of :data:`CALLS` calls."""
    for _ in range(1_000):
        function()
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(CALLS):
            function()
        timings.append((time.perf_counter() - started) / CALLS * 1e6)
    return statistics.median(timings)


def measure(repeats: int) -> dict[str, tuple[float, float]]:
    """Protocol -> (decode us, encode us)."""
    requests = bodies(tokens())
    infer_body = json.dumps(requests["/infer"][1]).encode()
    dtypes = {"input_ids": INT64, "attention_mask": INT64}

    def infer_decode() -> Any:
        features = parse_json(infer_body, 64)["features"]
        return to_arrays("minilm", features, dtypes)

    json_body = json.dumps(requests["v2 JSON"][1]).encode()
    _, binary_body, headers = requests["v2 binary"]
    header_length = int(headers["Inference-Header-Content-Length"])
    header = json.loads(binary_body[:header_length])
    tensors = binary_body[header_length:]
    fresh = [json.dumps({**header, "id": f"request-{i}"}).encode() for i in range(CALLS)]
    turn = iter(range(10**9))

    def binary_fresh_decode() -> Any:
        head = fresh[next(turn) % CALLS]
        return decode_request(head + tensors, len(head))

    output = {"sentence_embedding": np.random.default_rng(0).random(384, dtype=np.float32)}
    binary_output = (RequestedOutput("sentence_embedding", True),)
    payload = {"model_id": "minilm", "version": "1", "output": output, "request_id": "r"}

    def v2_encode(requested: Any) -> Callable[[], Any]:
        return lambda: encode_response(
            "minilm",
            version="1",
            request_id=None,
            outputs=output,
            requested=requested,
            binary_default=False,
        )

    return {
        "/infer": (
            per_call_us(infer_decode, repeats),
            per_call_us(lambda: jsonbytes.dumps(payload), repeats),
        ),
        "v2 JSON": (
            per_call_us(lambda: decode_request(json_body, None), repeats),
            per_call_us(v2_encode(None), repeats),
        ),
        "v2 binary, header kept": (
            per_call_us(lambda: decode_request(binary_body, header_length), repeats),
            per_call_us(v2_encode(binary_output), repeats),
        ),
        "v2 binary, new header": (
            per_call_us(binary_fresh_decode, repeats),
            per_call_us(v2_encode(binary_output), repeats),
        ),
    }


def render(results: dict[str, tuple[float, float]], command: str) -> str:
    lines = [
        "<!-- bench:codec:start -->",
        "### Reading and writing one MiniLM request, in process (tight loop)",
        "",
        f"Command: `{command}`  ",
        f"Machine: {_machine()}.",
        "",
        "The protocols table's sentence decoded as the server decodes it (for `/infer` the "
        "JSON parse and the conversion to the graph's arrays) and its 384-float answer "
        "encoded; microseconds per call, median of the repeats. Real requests cost two to "
        "three times these figures (see [performance](explanation/performance.md)).",
        "",
        "| protocol | decode us | encode us | both us |",
        "|---|---:|---:|---:|",
    ]
    for label, (decode, encode) in results.items():
        lines.append(f"| {label} | {decode:.2f} | {encode:.2f} | {decode + encode:.2f} |")
    lines += ["", "<!-- bench:codec:end -->"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=7, help="timings per figure (median)")
    parser.add_argument("--no-docs", action="store_true", help="print only")
    args = parser.parse_args()
    if not (MODEL / "tokenizer.json").is_file():
        raise SystemExit(
            f"{MODEL}/tokenizer.json is missing: run python examples/sentence-embeddings/prepare.py"
        )
    command = ("python benchmarks/codec.py " + " ".join(sys.argv[1:])).strip()
    block = render(measure(args.repeats), command)
    if not args.no_docs:
        write_docs("codec", block)
    print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
