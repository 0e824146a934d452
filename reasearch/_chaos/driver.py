"""One driver session of a soak's run, in its own process (the harness kills it with ``kill -9``).

``python -m reasearch._chaos.driver SPEC_JSON`` starts the run the spec names, or resumes it with
``takeover=True`` when the store already holds it, and drives it to its end: a method (best-of-n,
evolve, reflect) on a program task, its model behind the soak's endpoint with a short HTTP timeout and
quick retries, its evaluations on a one-worker sandbox pool of the spec's mode. Exit 0: the run
finished; anything else (a model error after the retries, a kill) leaves it resumable.

Trust boundary: candidates run only in the sandbox; model replies are parsed by the method, never run.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from reasearch.engine.config import SandboxConfig
from reasearch.engine.sandbox import SandboxPool
from reasearch.errors import FleetNotFoundError, RunNotFoundError
from reasearch.methods import open_method, start_method
from reasearch.models import ModelSpec, OpenAICompatibleModel, RetryPolicy
from reasearch.runs import LocalExecutor, RunState, open_store

__all__ = ["drive"]


def drive(spec: dict[str, Any]) -> int:
    """Starts or resumes the run of ``spec`` and drives it to its end; 0 when it finished."""
    model_spec = ModelSpec(provider="openai", name=spec["run_id"], base_url=spec["url"], attempts=spec["attempts"])
    model = OpenAICompatibleModel(model_spec, timeout_s=spec["client_timeout_s"],
                                  retry=RetryPolicy(max_attempts=spec["attempts"], base_delay_s=0.05,
                                                    max_delay_s=0.2, notify=lambda line: None))
    pool = SandboxPool(SandboxConfig(mode=spec["mode"], workers=1, lazy_start=True))
    if spec["method"] in ("compare", "fleet"):
        return _drive_fleet(spec)
    if spec["method"] == "mcp":
        return _drive_mcp(spec, model)
    store = open_store(spec["store"])
    try:
        with LocalExecutor(1, pool=pool) as executor:
            if spec["method"] in ("agent", "training"):
                return _drive_agent(spec, store, model_spec, model, executor)
            try:
                store.get_run(spec["run_id"], exact=True)
            except RunNotFoundError:  # the first session; a store that failed raises on
                method = "best-of-n" if spec["method"] == "prompt" else spec["method"]  # prompt: on gsm8k/v1
                runner = start_method(method, spec["task"], budget=spec["budget"], store=store,
                                      task_params=spec.get("task_params"),
                                      model_spec=model_spec, model=model, config=spec.get("config"),
                                      executor=executor, run_id=spec["run_id"], seed=spec["seed"])
            else:
                runner = open_method(spec["run_id"], store=store, model=model, executor=executor, takeover=True)
            runner.optimize()
            runner.run.close()
            return 0 if store.get_run(spec["run_id"], exact=True).state is RunState.FINISHED else 1
    finally:
        pool.close()
        store.close()


def _drive_agent(spec: dict[str, Any], store: Any, model_spec: ModelSpec, model: Any, executor: Any) -> int:
    from reasearch.agent import AgentConfig, open_agent, start_run

    run_dir = Path(spec["store"]).parent / "agents"
    try:
        store.get_run(spec["run_id"], exact=True)
    except RunNotFoundError:  # the first session; a store that failed raises on
        cap = spec["budget"].get("evaluations", spec["budget"].get("experiments", 0))
        config = AgentConfig(models={"agent": model_spec}, sandbox_mode=spec["mode"], max_turns=4 * int(cap) + 10,
                             use_compaction=False)
        if spec["method"] == "training":  # a repository task: the agent's experiment tools, a toy train.py
            agent = _start_training(spec, store, config, run_dir, model, executor)
        else:
            agent = start_run(spec["task"], budget=spec["budget"], config=config, run_dir=run_dir, store=store,
                              models={"agent": model}, executor=executor, run_id=spec["run_id"],
                              seed=spec["seed"])
    else:
        agent = open_agent(spec["run_id"], run_dir=run_dir, store=store, models={"agent": model},
                           executor=executor, takeover=True)
    agent.optimize()
    agent.run.close()
    return 0 if store.get_run(spec["run_id"], exact=True).state is RunState.FINISHED else 1


def _start_training(spec: dict[str, Any], store: Any, config: Any, run_dir: Path, model: Any, executor: Any) -> Any:
    """A run of the toy training task (``train.py`` saves the x of ``settings.json`` after sleeping its
    ``sleep_s``; no torch) in the spec's sandbox mode, and its agent: each experiment is one training job on a
    leased (fake) GPU slot, in an experiment folder of ``REASEARCH_EXPERIMENTS_DIR``."""
    from reasearch.agent import Agent
    from reasearch.evaluators.testing import ToyRepoTrainingTask
    from reasearch.runs import Run

    task = ToyRepoTrainingTask(grace_s=2.0, sandbox_mode=spec["mode"])
    run = Run.create(store, task=task, budget=spec["budget"], seed=spec["seed"], executor=executor,
                     config={"driver": "agent", "agent": config.to_dict()}, run_id=spec["run_id"])
    return Agent(run, run_dir / run.id, config=config, models={"agent": model})


def _drive_fleet(spec: dict[str, Any]) -> int:
    """A ``compare`` (two methods x one seed) or a fleet (two agent members): the first session starts it, a
    later one continues it (``compare --id``, ``fleet resume``). Its members share one model name (the
    fleet id) on the soak's endpoint; their evaluations run on this process's pool of the spec's mode."""
    import reasearch.engine.sandbox as sandbox
    from reasearch.fleets import FleetSpec, resume_fleet, run_fleet
    from reasearch.fleets.compare import compare_spec, run_compare

    fleet_id, store_url = spec["run_id"], spec["store"]
    told: set[tuple[str, str]] = set()

    def tell(results: list[Any]) -> None:  # a member's failure, as the fleet recorded it (its log's last word)
        for r in results:
            if r.state == RunState.FAILED.value and (r.run_id, r.reason) not in told:
                told.add((r.run_id, r.reason))
                print(f"chaos: member {r.run_id} failed: {r.reason}", file=sys.stderr, flush=True)

    sandbox.close_default_pool()  # the members' default pool, in the soak's mode (2 members at once)
    sandbox._default = SandboxPool(SandboxConfig(mode=spec["mode"], workers=2, lazy_start=True))  # noqa: SLF001
    evaluations = float(spec["budget"]["evaluations"])
    run_dir = str(Path(store_url).parent / "fleets")
    try:
        with open_store(store_url) as store:
            try:
                store.get_fleet(fleet_id)
                started = True
            except FleetNotFoundError:  # the first session, or one killed before it recorded the fleet
                started = False
        if spec["method"] == "compare":
            fleet = compare_spec([spec["task"]], ["best-of-n", "evolve"], seeds=[0], budget=evaluations,
                                 model=f"openai/{fleet_id}", base_url=spec["url"], parallelism=2,
                                 method_configs={"evolve": {"num_islands": 2}})
            report = run_compare(fleet, store=store_url, run_dir=run_dir, fleet_id=fleet_id,
                                 on_update=tell)  # `compare --id`
        elif started:
            report = resume_fleet(fleet_id, store=store_url, run_dir=run_dir, on_update=tell)  # `fleet resume`
        else:
            fleet = FleetSpec(tasks=(spec["task"],), seeds=(0, 1), models=(f"openai/{fleet_id}",),
                              budget={"evaluations": evaluations}, parallelism=2, base_url=spec["url"],
                              agent={"max_turns": int(4 * evaluations + 10), "use_compaction": False,
                                     "sandbox_mode": spec["mode"]})
            report = run_fleet(fleet, store=store_url, run_dir=run_dir, fleet_id=fleet_id, on_update=tell)
    finally:
        sandbox.close_default_pool()
    tell(list(report.members))
    return 0 if all(r.state == RunState.FINISHED.value for r in report.members) else 1


_RUN_IN_INSTRUCTIONS = re.compile(r"optimizer of run (\S+) on the task")


def _drive_mcp(spec: dict[str, Any], model: Any) -> int:
    """An MCP session: this process is the client (its proposals from the soak's endpoint, under the plan's
    name) of a ``reasearch mcp`` server it spawns; the harness kills that server with ``kill -9`` mid-call,
    and the next session reconnects with ``--run`` (the run's id is kept in ``ROOT/PLAN.run``)."""
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.shared.exceptions import MCPError

    from reasearch.models.messages import ModelRequest, text_block

    id_file = Path(spec["root"]) / f"{spec['run_id']}.run"
    run_id = id_file.read_text().strip() if id_file.exists() else ""
    first = [spec["task"], "--budget", str(int(spec["budget"]["evaluations"]))]
    args = ["mcp", *(["--run", run_id] if run_id else first), "--store", spec["store"], "--run-dir",
            str(Path(spec["store"]).parent / "mcp"), "--sandbox", spec["mode"], "--quiet"]
    params = StdioServerParameters(command=sys.executable, args=["-m", "reasearch.cli", *args], env=dict(os.environ))

    def propose(best: str) -> str:
        reply = model.complete(ModelRequest("", [{"role": "user", "content": [text_block(f"```python\n{best}\n```")]}]))
        text = "".join(b.get("text", "") for b in reply.content if isinstance(b, dict))
        return text.split("```python\n", 1)[-1].rsplit("\n```", 1)[0] if "```python" in text else best

    async def session() -> bool:
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            init = await s.initialize()
            found = _RUN_IN_INSTRUCTIONS.search(init.instructions or "")
            if found is None:
                raise RuntimeError(f"the MCP server named no run: {init.instructions!r}")
            id_file.write_text(found.group(1))
            for _ in range(4 * int(spec["budget"]["evaluations"]) + 10):
                status = "".join(getattr(c, "text", "") for c in (await s.call_tool("get_status", {})).content)
                if "evaluations: 0 left" in status:
                    done = await s.call_tool("finish", {"reason": "budget spent"})
                    return not done.is_error
                best = "".join(getattr(c, "text", "") for c in (await s.read_resource("reasearch://best")).contents)
                # nothing scored yet: the workspace's seed first (evaluate with no code), then mutations of the best
                call = {} if best.startswith("# no candidate") else {"code": await anyio.to_thread.run_sync(propose,
                                                                                                             best)}
                await s.call_tool("evaluate", call, read_timeout_seconds=120.0)
        return False

    try:
        return 0 if anyio.run(session) else 1
    except* (MCPError, anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionError,
             OSError) as lost:  # the server was killed: what the harness did; the next session reconnects
        why = lost.exceptions[0]
        print(f"chaos: the MCP server is gone ({type(why).__name__}: {why}); reconnect with --run",
              file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(drive(json.loads(sys.argv[1])))
