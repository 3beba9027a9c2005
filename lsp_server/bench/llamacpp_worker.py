"""llama-cpp-python in a process of its own, for bench's `llamacpp` peer (peers.py starts it by
path, with the user's environment: importing our packages would set OMP_WAIT_POLICY first).

Reads one JSON request a line on stdin, {"prompt": ids, "max_new_tokens": n, "cold": bool,
"eos": ids}, and answers each with one line {"tokens": ids, "ms": decode time}: greedy, the
prompt prefilled before the clock starts unless cold."""
import json
import sys
import time

from llama_cpp import Llama


def main(model: str, threads: int) -> None:
    llm = Llama(model_path=model, n_ctx=4096, n_threads=threads, n_threads_batch=threads, verbose=False)
    for line in sys.stdin:
        request = json.loads(line)
        prompt, eos = request["prompt"], set(request["eos"])
        llm.reset()
        if not request["cold"]:
            llm.eval(prompt[:-1])  # generate() reuses it as a common prefix
        new = []
        start = time.perf_counter()
        for token in llm.generate(prompt, top_k=1, temp=0.0):
            new.append(token)
            if token in eos or len(new) == request["max_new_tokens"]:
                break
        ms = (time.perf_counter() - start) * 1000
        sys.stdout.write(json.dumps({"tokens": new, "ms": ms}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
