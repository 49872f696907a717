"""Child-process entry point that hosts llama.cpp's OpenAI-compatible server through xllamacpp.

It runs in its own Python process (started by `bamboo.llm.local.LocalLLMServer`) so that a crash in
native code cannot take a worker down. It lives exactly as long as its parent wants it: it serves
until its stdin reaches end-of-file, which happens when the parent closes the pipe in `stop()` or
dies for any reason, so no orphaned model server outlives the worker.

Run as ``python -m bamboo.llm.local_server_process --model FILE --port N``.
"""

from __future__ import annotations

import argparse
import sys


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="GGUF file to serve")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--alias", default="local", help="model name the server answers to")
    parser.add_argument("--ctx-per-slot", type=int, default=2048)
    parser.add_argument("--parallel", type=int, default=2, help="requests decoded concurrently")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=512, help="server-side cap on generated tokens")
    parser.add_argument("--repeat-penalty", type=float, default=1.15,
                        help="default repetition penalty; keeps a tiny model from repeating list items until the cap")
    parser.add_argument("--repeat-last-n", type=int, default=256)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.hostnames = [args.host]
    params.port = args.port
    params.model_alias = {args.alias}
    params.n_parallel = args.parallel
    params.n_ctx = args.ctx_per_slot * args.parallel
    params.n_predict = args.max_tokens
    params.sampling.penalty_repeat = args.repeat_penalty
    params.sampling.penalty_last_n = args.repeat_last_n
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    server = xllamacpp.Server(params)
    print(f"bamboo local LLM serving {args.model} as {args.alias!r} on {server.listening_address}", file=sys.stderr, flush=True)
    sys.stdin.buffer.read()  # returns at end-of-file: the parent closed the pipe or is gone
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
