"""Scale-out check: Dynamo's frontend in front of two Aquila workers, on loopback only.

Run by `cargo xtask scale-out-check` inside the virtual environment it makes (ai-dynamo,
openai). Starts the frontend (file discovery: no etcd or NATS) and two workers, sends chat
requests with the `openai` client, and checks that

1. every request of a first round completes, with the same text at T = 0 as Aquila's offline
   `Llm` (the `generate` example) gives for the same chat;
2. both workers served requests (each worker's own `/metrics`, by its `engine` label);
3. after one worker is killed in the middle of a second round, every request of that round
   either completes or fails cleanly (an HTTP error, within a timeout), and a third round is
   served completely by the worker left;
4. everything started is stopped at the end.

Its last line: `scale-out: R/N requests ok, served by W workers, survived worker loss: yes|no`,
where N counts the requests of the first and third rounds (those that must succeed).
"""

import argparse
import concurrent.futures
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import openai

PROMPTS = [
    "What is the capital of France?",
    "Name three primary colors.",
    "Write one sentence about the sea.",
    "What is two plus two?",
    "Give me a synonym for happy.",
    "What does a bee make?",
    "Name a planet in our solar system.",
    "What color is the sky on a clear day?",
]
MAX_TOKENS = 24
REQUEST_TIMEOUT_S = 120


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Processes:
    """Every process the check starts, so that all are stopped at the end."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.started = {}

    def start(self, name, argv, env):
        log = open(os.path.join(self.log_dir, f"{name}.log"), "w")
        process = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.started[name] = process
        return process

    def log(self, name):
        with open(os.path.join(self.log_dir, f"{name}.log")) as f:
            return f.read()

    def kill(self, name):
        process = self.started[name]
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def stop_all(self):
        for process in self.started.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.time() + 15
        for process in self.started.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        return all(p.poll() is not None for p in self.started.values())


def wait_for(what, predicate, timeout_s, processes):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if predicate():
            return
        for name, process in processes.started.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited while waiting for {what}:\n{processes.log(name)[-3000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {what}")


def worker_metrics_url(processes, name):
    match = re.search(r"metrics (http://\S+/metrics)", processes.log(name))
    return match.group(1) if match else None


def served_requests(metrics_url):
    """Finished requests a worker's own `/metrics` counts (all finish reasons)."""
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if re.match(r"^\S*request_success_total\{", line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def expected_outputs(generate, model, tmp):
    prompts_file = os.path.join(tmp, "prompts.jsonl")
    with open(prompts_file, "w") as f:
        for prompt in PROMPTS:
            f.write(json.dumps({"messages": [{"role": "user", "content": prompt}]}) + "\n")
    out = os.path.join(tmp, "expected.json")
    subprocess.run(
        [generate, "--model", model, "--prompts-file", prompts_file,
         "--max-tokens", str(MAX_TOKENS), "--temperature", "0", "--output-json", out],
        check=True, stdout=subprocess.DEVNULL,
    )
    with open(out) as f:
        outputs = json.load(f)
    return [o["text"] for o in outputs]


def chat(client, model, prompt):
    response = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=MAX_TOKENS,
        temperature=0,
    )
    return response.choices[0].message.content


def round_of_requests(client, model, prompts):
    """Sends `prompts` concurrently; returns each one's text or the exception it raised."""
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        futures = [pool.submit(chat, client, model, p) for p in prompts]
        results = []
        for future in futures:
            try:
                results.append(future.result())
            except Exception as error:  # a clean failure: an API error or a timeout
                results.append(error)
        return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", required=True)
    parser.add_argument("--generate", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--log-dir", required=True)
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="aquila-scale-out-")
    os.makedirs(args.log_dir, exist_ok=True)
    env = dict(os.environ)
    env.update({
        "DYN_DISCOVERY_BACKEND": "file",
        "DYN_FILE_KV": os.path.join(tmp, "discovery"),
        "DYN_REQUEST_PLANE": "tcp",
        "DYN_TCP_RPC_HOST": "127.0.0.1",
        "DYN_TCP_RESPONSE_STREAM_HOST": "127.0.0.1",
        "DYN_EVENT_PLANE_HOST": "127.0.0.1",
        "DYN_SYSTEM_ENABLED": "false",
        "RAYON_NUM_THREADS": "1",
    })
    model_name = "smollm2"
    processes = Processes(args.log_dir)
    ok = total = 0
    served_by = 0
    survived = False
    try:
        print("scale-out: computing the expected outputs with the offline engine", flush=True)
        expected = expected_outputs(args.generate, args.model, tmp)

        http_port = free_port()
        processes.start("frontend", [sys.executable, "-m", "dynamo.frontend",
                                     "--http-host", "127.0.0.1", "--http-port", str(http_port),
                                     "--discovery-backend", "file",
                                     "--router-mode", "round-robin"], env)
        for name in ("worker-a", "worker-b"):
            processes.start(name, [args.worker, "--model", args.model,
                                   "--served-model-name", model_name,
                                   "--engine-label", name, "--max-num-seqs", "4"], env)
        for name in ("worker-a", "worker-b"):
            wait_for(f"{name} to register", lambda n=name: "ready" in processes.log(n), 300,
                     processes)
        base_url = f"http://127.0.0.1:{http_port}/v1"

        def model_listed():
            try:
                listed = urllib.request.urlopen(f"{base_url}/models", timeout=5).read().decode()
                return model_name in listed
            except OSError:
                return False

        wait_for("the frontend to list the model", model_listed, 120, processes)
        client = openai.OpenAI(base_url=base_url, api_key="none",
                               timeout=REQUEST_TIMEOUT_S, max_retries=0)

        # Round 1: both workers up; every request must succeed with the offline text.
        prompts = PROMPTS * 2
        results = round_of_requests(client, model_name, prompts)
        for prompt, result in zip(prompts, results):
            total += 1
            want = expected[PROMPTS.index(prompt)]
            if isinstance(result, Exception):
                print(f"round 1: {prompt!r} failed: {result}")
            elif result != want:
                print(f"round 1: {prompt!r}: {result!r} differs from the offline {want!r}")
            else:
                ok += 1
        print(f"round 1: {ok}/{total} requests ok", flush=True)
        counts = {name: served_requests(worker_metrics_url(processes, name))
                  for name in ("worker-a", "worker-b")}
        served_by = sum(1 for c in counts.values() if c > 0)
        print(f"requests served per worker: {counts}", flush=True)

        # Round 2: worker-b is killed while requests are in flight; each either completes or
        # fails cleanly (no hang past the timeout).
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            in_flight = pool.submit(round_of_requests, client, model_name, PROMPTS)
            time.sleep(1.0)
            processes.kill("worker-b")
            results = in_flight.result(timeout=REQUEST_TIMEOUT_S + 30)
        completed = sum(1 for r in results if not isinstance(r, Exception))
        print(f"round 2 (worker-b killed mid-round): {completed}/{len(results)} completed, "
              f"{len(results) - completed} failed cleanly", flush=True)

        # Round 3: the worker left serves everything, once the frontend has dropped the killed
        # worker (its discovery entry expires; until then round-robin still picks it and such
        # requests fail cleanly with 503): wait for four probes in a row to succeed.
        deadline = time.time() + 120
        in_a_row = 0
        while in_a_row < 4 and time.time() < deadline:
            try:
                chat(client, model_name, PROMPTS[0])
                in_a_row += 1
            except openai.APIError:
                in_a_row = 0
                time.sleep(1.0)
        print(f"frontend routes around the killed worker: {'yes' if in_a_row >= 4 else 'no'}",
              flush=True)
        results = round_of_requests(client, model_name, PROMPTS)
        round3_ok = 0
        for prompt, result in zip(PROMPTS, results):
            total += 1
            if not isinstance(result, Exception) and result == expected[PROMPTS.index(prompt)]:
                round3_ok += 1
            else:
                print(f"round 3: {prompt!r}: {result!r}")
        ok += round3_ok
        survived = round3_ok == len(PROMPTS)
        print(f"round 3 (one worker left): {round3_ok}/{len(PROMPTS)} requests ok", flush=True)
    finally:
        stopped = processes.stop_all()
        print(f"stopped everything started: {'yes' if stopped else 'no'}", flush=True)
    print(f"scale-out: {ok}/{total} requests ok, served by {served_by} workers, "
          f"survived worker loss: {'yes' if survived else 'no'}")
    return 0 if ok == total and served_by == 2 and survived and stopped else 1


if __name__ == "__main__":
    sys.exit(main())
