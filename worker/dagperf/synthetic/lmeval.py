"""Sessions from lm-eval-harness tasks, as Veeksha's `lmeval` session generator builds them.

lm-eval turns each document of a task into requests (`Instance`s): a `generate_until` request is
a context (the task's description and few-shot examples, then the document's `doc_to_text`) and
generation arguments; a `loglikelihood` request (multiple-choice tasks: one per choice) is a
context and a continuation to score. As in Veeksha, a document is one session whose requests are
independent (none waits for another or carries another's history), one per instance and repeat:

- generate_until: the context as one user message; `max_gen_toks` is the token limit, `until`
  the `stop` strings, and the other generation arguments (`do_sample`, `temperature`, ...) go in
  the body as they are, as Veeksha sends them;
- loglikelihood: the context and the continuation as one message, a limit of 1 token, `echo`,
  `logprobs` 1 and `temperature` 0: what Veeksha sends to /completions to score the
  continuation, so `--endpoint-type completions` sends the same bodies.

Other request types (loglikelihood_rolling) and tasks with images or audio are refused by name.
The documents: with N tasks, each task's first ceil(max_sessions / N), taken in turn from each
task, the first max_sessions kept. Few-shot: a task's `num_fewshot` becomes the config's unless
the task fixes it at 0, and each task's example sampler is seeded from the config's seed by the
stream Veeksha draws it from, so a seed picks Veeksha's examples (given the same lm-eval).

lm_eval is an optional extra, imported here and only here, when a config names lmeval. Loading a
task reads its dataset with Hugging Face `datasets`: a local file, or the hub (or its cache).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
import warnings
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from dagperf.dataset.specs import GraphNode, Payload, SessionSpec
from dagperf.synthetic.outcomes import ConfigError, LmevalSource

INSTALL = "pip install 'dagperf[lmeval]' (in a checkout: pip install -e '.[lmeval]')"
TASKS = "session_generator.tasks"
SENT = ("generate_until", "loglikelihood")  # the request types Veeksha sends
SEED_SPACE = 2**32  # Veeksha's seeds are below this
SCORING = {"echo": True, "logprobs": 1, "temperature": 0}  # Veeksha's for a loglikelihood

Document = tuple[str, int, list[Any]]  # task name, document id, its instances in order


def lmeval_sessions(config: LmevalSource) -> list[SessionSpec]:
    """One session per document of the config's tasks, in Veeksha's order."""
    tasks = _load_tasks(config)
    _set_fewshot(tasks, config)
    per_task = None if config.max_sessions < 0 else math.ceil(config.max_sessions / len(tasks))
    built = [_documents(name, task, per_task, config.source) for name, task in tasks]
    problems = [problem for documents in built for problem in _unsent(documents)]
    if problems:
        raise ConfigError(config.source, problems)
    taken = [doc for turn in _in_turn(built) for doc in turn]
    if config.max_sessions >= 0:
        taken = taken[: config.max_sessions]
    return [_session(name, doc_id, instances) for name, doc_id, instances in taken]


def _load_tasks(config: LmevalSource) -> list[tuple[str, Any]]:
    """The leaf tasks the config names, groups expanded, in lm-eval's order."""
    task_manager, get_task_dict = _lm_eval(config.source)
    paths = [str(p) for p in config.include_paths]
    with _failing(config.source, f"{TASKS}: cannot index the tasks"):
        manager = None
        if paths:  # lm-eval's own index takes seconds: skipped when the paths hold every task
            manager = task_manager(include_path=paths, include_defaults=False)
            if not set(config.tasks) <= set(manager.all_subtasks):
                manager = None
        if manager is None:
            manager = task_manager(include_path=paths or None)
    known = set(manager.all_tasks)
    if unknown := [name for name in config.tasks if name not in known]:
        where = "lm-eval's tasks" + (" and the include_path" if paths else "")
        raise ConfigError(
            config.source,
            [f"{TASKS}: unknown task {name!r} (not among {where})" for name in unknown],
        )
    with _failing(config.source, f"{TASKS}: cannot load {', '.join(config.tasks)}"):
        with warnings.catch_warnings():  # deprecated since 0.4.13; it is what Veeksha calls, and
            warnings.simplefilter("ignore", DeprecationWarning)  # its order of tasks is Veeksha's
            return _leaves(get_task_dict(list(config.tasks), manager))


def _lm_eval(source: str) -> tuple[Any, Any]:
    try:
        from lm_eval.tasks import TaskManager, get_task_dict
    except ImportError as e:
        missing = isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] == "lm_eval"
        problem = (
            f"lmeval reads lm-eval-harness tasks, and lm_eval is not installed: {INSTALL}"
            if missing
            else f"lmeval: lm_eval cannot be imported: {e}"  # one of its own dependencies
        )
        raise ConfigError(source, [f"session_generator.type: {problem}"]) from None
    return TaskManager, get_task_dict


@contextlib.contextmanager
def _failing(source: str, what: str) -> Iterator[None]:
    """lm-eval and `datasets` raise whatever their parts raise (a missing file, an unreachable
    hub, a template error in a task): the user gets which step failed and why, not a traceback."""
    try:
        yield
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(source, [f"{what}: {type(e).__name__}: {e}"]) from None


def _leaves(task_dict: dict[Any, Any]) -> list[tuple[str, Any]]:
    """(name, task) of every task in a get_task_dict result, depth first, as Veeksha walks it."""
    found = []
    for key, value in task_dict.items():
        if isinstance(value, dict):
            found += _leaves(value)
        elif isinstance(value, tuple):  # older lm-eval: (group, task)
            if value[1] is not None:
                found.append((str(key), value[1]))
        elif value is not None:
            found.append((str(key), value))
    return found


def _set_fewshot(tasks: list[tuple[str, Any]], config: LmevalSource) -> None:
    """Veeksha's few-shot settings: the config's count unless the task says 0, and a sampler
    seed per task, drawn in task order from the config seed's `fewshot` stream."""
    draws = random.Random(_derived_seed(config.seed % SEED_SPACE, "fewshot"))
    for _, task in tasks:
        if task.get_config("num_fewshot") != 0:
            task.set_config(key="num_fewshot", value=config.num_fewshot)
        task.set_fewshot_seed(seed=draws.randint(0, SEED_SPACE - 1))


def _derived_seed(root: int, *path: str) -> int:
    """Veeksha's child seed: BLAKE2b (8 bytes) of the root seed and the path, below 2**32."""
    hasher = hashlib.blake2b(digest_size=8)
    hasher.update(root.to_bytes(8, byteorder="big", signed=False))
    for part in path:
        hasher.update(part.encode("utf-8"))
    return int.from_bytes(hasher.digest(), byteorder="big") % SEED_SPACE


def _documents(name: str, task: Any, limit: int | None, source: str) -> list[Document]:
    """The task's first `limit` documents (all: None), each with its instances in order."""
    with _failing(source, f"{TASKS}: {name!r}: cannot build its requests"):
        task.build_all_requests(limit=limit)
        by_doc: dict[int, list[Any]] = defaultdict(list)
        for instance in task.instances:
            by_doc[instance.doc_id].append(instance)
        order = [doc_id for doc_id, _ in task.doc_iterator(limit=limit)]
    return [(name, d, sorted(by_doc[d], key=lambda i: i.idx)) for d in order]


def _unsent(documents: list[Document]) -> list[str]:
    """What dagperf cannot send of a task, once for the task."""
    instances = [i for _, _, doc in documents for i in doc]
    if not instances:
        return []
    name = documents[0][0]
    problems = []
    if kinds := sorted({i.request_type for i in instances} - set(SENT)):
        problems.append(
            f"{TASKS}: {name!r} makes {', '.join(kinds)} requests; dagperf sends "
            f"{' and '.join(SENT)}, as Veeksha does"
        )
    if any(len(i.args) > 2 and isinstance(i.args[2], dict) and i.args[2] for i in instances):
        problems.append(f"{TASKS}: {name!r} sends images or audio; only text is supported")
    return problems


def _in_turn(built: list[list[Document]]) -> Iterator[list[Document]]:
    """The first document of each task, then the second of each, ..."""
    for k in range(max((len(documents) for documents in built), default=0)):
        yield [documents[k] for documents in built if k < len(documents)]


def _session(name: str, doc_id: int, instances: list[Any]) -> SessionSpec:
    payloads = [_payload(i) for i in instances for _ in range(int(i.repeats or 1))]
    nodes = tuple(GraphNode(str(k), payload) for k, payload in enumerate(payloads))
    return SessionSpec(f"{name}:{doc_id}", nodes)


def _payload(instance: Any) -> Payload:
    context, second = instance.args[0], instance.args[1]
    if instance.request_type == "loglikelihood":
        return Payload.of([_user(context + second)], max_tokens=1, extra=dict(SCORING))
    arguments = dict(second)
    limit = arguments.pop("max_gen_toks", None)
    if "until" in arguments:
        arguments.setdefault("stop", arguments.pop("until"))
    tokens = limit if isinstance(limit, int) and not isinstance(limit, bool) else None
    return Payload.of([_user(context)], max_tokens=tokens, extra=arguments or None)


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}
