"""The Benchmark CRD, generated from `spec.py` (the chart holds the same file):

    python -m dagperf_operator.crd > crds/benchmark.yaml
    cp crds/benchmark.yaml charts/dagperf/crds/

Pydantic's JSON schema is turned into the structural OpenAPI v3 schema Kubernetes wants:
references inlined, optional fields as plain (not required) properties, free-form maps kept
with `x-kubernetes-preserve-unknown-fields`, quantities as `x-kubernetes-int-or-string`, and JSON
Schema's numeric `exclusiveMinimum` as OpenAPI v3's boolean. A test keeps the committed file
equal to what this prints, so the models stay the one definition.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml
from pydantic import BaseModel

from dagperf_operator.spec import BenchmarkSpec
from dagperf_operator.status_model import BenchmarkStatus

GROUP = "dagperf.io"
VERSION = "v1alpha1"
KIND = "Benchmark"
PLURAL = "benchmarks"

PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Progress", "type": "string", "jsonPath": ".status.progress.display"},
    {"name": "Req/s", "type": "number", "jsonPath": ".status.summary.requestThroughput"},
    {
        "name": "TTFT p99",
        "type": "number",
        "jsonPath": ".status.summary.ttftP99Ms",
        "description": "Time to first token, 99th percentile, in milliseconds",
    },
    {
        "name": "Best",
        "type": "number",
        "jsonPath": ".status.search.best",
        "description": "A search's answer: the highest load meeting every objective",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

# Rules the structural schema cannot state; checked by the API server (CEL, Kubernetes 1.25+).
VALIDATIONS: dict[tuple[str, ...], list[dict[str, str]]] = {
    ("results", "persistentVolumeClaim"): [
        {
            "rule": "has(self.claimName) != has(self.size)",
            "message": "give either claimName (an existing claim) or size (a new one)",
        },
    ],
}


def structural(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    return _convert(schema, schema.get("$defs", {}), ())


def _convert(node: dict[str, Any], defs: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    if "$ref" in node:
        resolved = defs[node["$ref"].rsplit("/", 1)[1]]
        return _convert({**resolved, **{k: v for k, v in node.items() if k != "$ref"}}, defs, path)
    out: dict[str, Any] = {}
    if "description" in node:
        out["description"] = node["description"]
    variants = [v for v in node.get("anyOf", []) if v.get("type") != "null"]
    if {v.get("type") for v in variants} == {"integer", "string"}:
        out["x-kubernetes-int-or-string"] = True
    elif variants:  # X | None: optional, described by X
        inner = _convert(variants[0], defs, path)
        out = {**inner, **out}
    kind = node.get("type")
    if kind == "object" and "properties" in node:
        out["type"] = "object"
        out["properties"] = {
            name: _convert(prop, defs, (*path, name)) for name, prop in node["properties"].items()
        }
        if node.get("required"):
            out["required"] = list(node["required"])
        if rules := VALIDATIONS.get(path):
            out["x-kubernetes-validations"] = rules
    elif kind == "object":
        values = node.get("additionalProperties")
        if isinstance(values, dict) and values:
            out["type"] = "object"
            out["additionalProperties"] = _convert(values, defs, path)
        else:
            out["type"] = "object"
            out["x-kubernetes-preserve-unknown-fields"] = True
    elif kind == "array":
        out["type"] = "array"
        out["items"] = _convert(node["items"], defs, path)
    elif kind is not None:
        out["type"] = kind
    if "enum" in node or "const" in node:
        out["type"] = out.get("type", "string")
        out["enum"] = node.get("enum", [node.get("const")])
    for key in ("minimum", "maximum", "minLength", "maxLength", "minItems", "pattern"):
        if key in node:
            out[key] = node[key]
    if "exclusiveMinimum" in node:
        out["minimum"] = node["exclusiveMinimum"]
        out["exclusiveMinimum"] = True
    if "default" in node and node["default"] is not None:
        out["default"] = node["default"]
    return out


def benchmark_crd() -> dict[str, Any]:
    spec = structural(BenchmarkSpec)
    spec["description"] = "What to benchmark and how."
    status = structural(BenchmarkStatus)
    status["description"] = "What the operator observed."
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": ["bench"],
                "categories": ["dagperf"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A dagperf benchmark: DAG-shaped conversations sent to "
                            "an OpenAI-compatible endpoint by a scheduler and worker pods.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def crd_yaml() -> str:
    header = "# Generated from dagperf_operator/spec.py by `python -m dagperf_operator.crd`.\n"
    body: str = yaml.safe_dump(benchmark_crd(), sort_keys=False, width=100)
    return header + body


if __name__ == "__main__":
    sys.stdout.write(crd_yaml())
