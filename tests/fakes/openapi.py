"""Keeps the GitHub stand-in honest: every request it accepts and every response it gives is checked against
GitHub's published OpenAPI description of the REST API.

The description is the `@octokit/openapi` npm package (GitHub's own description, republished by the Octokit
team): `script/bootstrap --test` unpacks its `generated/api.github.com.json` of release <OPENAPI_VERSION> into
.ci/node;
`KV_PARITY_GITHUB_OPENAPI` may point at another copy of `api.github.com.json`. It is parsed once per test
session; operations are matched and their validators built on first use.

Strict beyond the description where it is silent: a JSON object must not carry properties its schema does
not name (GitHub's schemas list every field, so an extra one in a request is a field GitHub ignores and the
bot relies on in vain, and an extra one in a response is a field the bot could come to rely on although
GitHub never sends it), and a query parameter must be one the operation declares.
"""

from __future__ import annotations

import functools
import json
import os
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import ValidationError
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from jsonschema.validators import extend
from openapi_schema_validator import OAS30ReadValidator, OAS30WriteValidator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

OPENAPI_VERSION = "23.0.2"
"""The pinned `@octokit/openapi` release (its api.github.com.json describes REST API version 2022-11-28)."""
SPEC_ENV = "KV_PARITY_GITHUB_OPENAPI"
DEFAULT_SPEC = (
    Path(__file__).resolve().parents[2] / ".ci/node/node_modules/@octokit/openapi/generated/api.github.com.json"
)
INSTALL = "script/bootstrap --test"
SPEC_URI = "urn:github-rest-openapi"
ERROR_STATUSES = frozenset({400, 401, 403, 404, 409, 410, 422, 429, 500, 502, 503})
"""Answers GitHub gives on any operation whether or not its description lists them; they must still have
GitHub's error shape (`basic-error`)."""


class SpecMissing(RuntimeError):
    """The OpenAPI description is not installed; the message says how to install it."""


def _strict(base: type[Validator]) -> type[Validator]:
    """`base`, failing objects that carry properties their schema does not name (when the schema names its
    properties and says nothing about others)."""
    properties = base.VALIDATORS["properties"]

    def strict_properties(validator: Any, declared: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
        yield from properties(validator, declared, instance, schema)
        if validator.is_type(instance, "object") and "additionalProperties" not in schema:
            extra = sorted(set(instance) - set(declared))
            if extra:
                yield ValidationError(f"properties not in GitHub's schema: {', '.join(extra)}")

    enum = base.VALIDATORS["enum"]

    def nullable_enum(validator: Any, allowed: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
        # OpenAPI 3.0 `nullable: true` admits null even where an enum does not list it (GitHub's check-run
        # `conclusion` is such an enum, and GitHub answers null there).
        if instance is None and schema.get("nullable"):
            return
        yield from enum(validator, allowed, instance, schema)

    one_of = base.VALIDATORS["oneOf"]

    def one_of_discriminating_objects(
        validator: Any, branches: Any, instance: Any, schema: Mapping[str, Any]
    ) -> Iterator[Any]:
        # A discriminator names a property, so it can only pick among objects; GitHub puts one on the
        # contents answer, whose directory branch is an array (a plain oneOf decides that one).
        if "discriminator" in schema and not validator.is_type(instance, "object"):
            schema = {key: value for key, value in schema.items() if key != "discriminator"}
        yield from one_of(validator, branches, instance, schema)

    return extend(
        base, {"properties": strict_properties, "enum": nullable_enum, "oneOf": one_of_discriminating_objects}
    )


StrictRead = _strict(OAS30ReadValidator)
StrictWrite = _strict(OAS30WriteValidator)


@dataclass(frozen=True)
class Operation:
    method: str
    template: str
    pointer: str
    """JSON pointer of the operation object in the description."""
    spec: Mapping[str, Any]

    @property
    def name(self) -> str:
        return f"{self.method} {self.template}"


class GitHubOpenAPI:
    """The parsed description: operations by method and path, validators built per schema on demand."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec
        self.registry: Registry[Any] = Registry().with_resource(
            SPEC_URI, Resource.from_contents(dict(spec), default_specification=DRAFT4)
        )
        self._routes: list[tuple[re.Pattern[str], str, int]] = []
        for template in spec["paths"]:
            # `{path}` spans segments, and so does a git ref ending the path (`git/matching-refs/heads/feature/`).
            pattern = "".join(
                (".+" if part == "{path}" or (part == "{ref}" and template.endswith(part)) else "[^/]+")
                if part.startswith("{")
                else re.escape(part)
                for part in re.split(r"(\{[^}]+\})", template)
            )
            literal = len(re.sub(r"\{[^}]+\}", "", template))
            self._routes.append((re.compile(f"^{pattern}$"), template, literal))
        self._routes.sort(key=lambda route: -route[2])

    def operation(self, method: str, path: str) -> Operation | None:
        for pattern, template, _ in self._routes:
            if pattern.match(path):
                operation = self.spec["paths"][template].get(method.lower())
                if operation is not None:
                    pointer = "/paths/" + _escape(template) + "/" + method.lower()
                    return Operation(method.upper(), template, pointer, operation)
        return None

    def resolve(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in node:
            node = self.registry.resolver(SPEC_URI).lookup(f"{SPEC_URI}{node['$ref']}").contents
        return node

    @functools.cache  # noqa: B019 - one instance per session, kept for the session
    def validator(self, pointer: str, write: bool) -> Validator:
        root = {"$ref": f"{SPEC_URI}#{urllib.parse.quote(pointer, safe='/~')}"}
        kind = StrictWrite if write else StrictRead
        return kind(root, registry=self.registry)  # type: ignore[call-arg]

    def check_request(self, operation: Operation, query: Mapping[str, str], body: Any) -> list[str]:
        problems: list[str] = []
        declared = {}
        for parameter in operation.spec.get("parameters", []):
            parameter = self.resolve(parameter)
            if parameter["in"] == "query":
                declared[parameter["name"]] = parameter
        for name, value in query.items():
            parameter = declared.get(name)
            if parameter is None:
                problems.append(f"query parameter {name!r} is not one GitHub declares")
                continue
            schema = self.resolve(parameter.get("schema", {}))
            typed: Any = value
            if schema.get("type") == "integer" and re.fullmatch(r"-?\d+", value):
                typed = int(value)
            elif schema.get("type") == "boolean" and value in ("true", "false"):
                typed = value == "true"
            problems += [f"query {name}={value!r}: {e}" for e in _errors(StrictWrite(schema), typed)]
        request = operation.spec.get("requestBody")
        if request is not None:
            request = self.resolve(request)
            if body is None and request.get("required"):
                problems.append("request body required but absent")
            elif body is not None:
                content_type = _json_content(request.get("content", {}))
                if content_type is not None:
                    pointer = f"{operation.pointer}/requestBody/content/{_escape(content_type)}/schema"
                    if "$ref" in operation.spec["requestBody"]:
                        pointer = operation.spec["requestBody"]["$ref"][1:] + f"/content/{_escape(content_type)}/schema"
                    problems += [f"request body: {e}" for e in _errors(self.validator(pointer, True), body)]
        elif body not in (None, {}):
            problems.append("request body sent to an operation that takes none")
        return problems

    def check_response(self, operation: Operation, status: int, body: Any) -> list[str]:
        responses = operation.spec["responses"]
        key = str(status)
        if key not in responses:
            if status in ERROR_STATUSES:
                pointer = "/components/schemas/" + ("validation-error" if status == 422 else "basic-error")
                return [f"error response {status}: {e}" for e in _errors(self.validator(pointer, False), body)]
            return [f"status {status} is not one GitHub documents for {operation.name} ({', '.join(responses)})"]
        response = responses[key]
        pointer = f"{operation.pointer}/responses/{key}"
        if "$ref" in response:
            pointer = response["$ref"][1:]
        content = self.resolve(response).get("content") or {}
        content_type = _json_content(content)
        if content_type is None:
            return [] if body is None or not content else []
        if body is None:
            return [f"response {status} has no body; GitHub's has one"]
        schema_pointer = f"{pointer}/content/{_escape(content_type)}/schema"
        return [f"response {status}: {e}" for e in _errors(self.validator(schema_pointer, False), body)]


    def check_webhook(self, schema: str, payload: Any) -> list[str]:
        """Where a webhook payload departs from GitHub's schema of that event (`components/schemas/<schema>`, e.g.
        `webhook-merge-group-checks-requested`), strictly: a field the schema does not name is a departure too."""
        return _errors(self.validator(f"/components/schemas/{schema}", False), payload)

    def complete(self, operation: Operation, status: int, data: Any) -> Any:
        """`data` with the fields its schema requires but it lacks taken from GitHub's documented example of the
        answer (recursively). The stand-in models what the bot reads; the rest of an answer is GitHub's own
        example, never a field the schema does not name. A missing list is empty (GitHub's examples do not
        always satisfy GitHub's schemas in list items the stand-in never models)."""
        response = operation.spec["responses"].get(str(status))
        if response is None:
            return data
        content = self.resolve(response).get("content") or {}
        content_type = _json_content(content)
        if content_type is None:
            return data
        return self._complete(data, self.example(operation, status), content[content_type].get("schema", {}))

    def _properties(self, schema: Mapping[str, Any]) -> dict[str, Any] | None:
        schema = self.resolve(schema)
        if "properties" in schema:
            return dict(schema["properties"])
        parts = schema.get("allOf") or schema.get("oneOf") or schema.get("anyOf")
        if not parts:
            return None
        merged: dict[str, Any] = {}
        for part in parts:
            merged.update(self._properties(part) or {})
        return merged or None

    def _required(self, schema: Mapping[str, Any]) -> set[str]:
        schema = self.resolve(schema)
        names = set(schema.get("required", []))
        for part in schema.get("allOf", []):
            names |= self._required(part)
        return names

    def _branch(self, schema: Mapping[str, Any], data: Mapping[str, Any]) -> Mapping[str, Any]:
        """The oneOf/anyOf branch an object answer is meant to be: the one its discriminator maps to, else
        the first whose properties name every field it has."""
        branches = schema.get("oneOf") or schema.get("anyOf")
        if not branches:
            return schema
        discriminator = schema.get("discriminator") or {}
        chosen = (discriminator.get("mapping") or {}).get(str(data.get(discriminator.get("propertyName", ""))))
        if chosen is not None:
            return self.resolve({"$ref": chosen})
        for branch in branches:
            if set(data) <= set(self._properties(branch) or {}):
                return self.resolve(branch)
        return schema

    def _complete(self, data: Any, example: Any, schema: Mapping[str, Any]) -> Any:
        schema = self.resolve(schema)
        if isinstance(data, dict):
            schema = self._branch(schema, data)
            properties = self._properties(schema)
            if properties is None:
                return data
            merged = dict(data)
            required = self._required(schema)
            for key, sub in properties.items():
                if key in data:
                    if isinstance(example, dict) and key in example:
                        merged[key] = self._complete(data[key], example[key], sub)
                elif key in required and isinstance(example, dict) and key in example:
                    merged[key] = [] if isinstance(example[key], list) else self._pruned(example[key], sub)
            return merged
        if isinstance(data, list) and isinstance(example, list) and example:
            items = schema.get("items", {})
            return [self._complete(item, example[0], items) for item in data]
        return data

    def _pruned(self, value: Any, schema: Mapping[str, Any]) -> Any:
        """An example value cut down to the fields its schema requires."""
        if isinstance(value, dict):
            properties = self._properties(schema)
            if properties is None:
                return value
            required = self._required(schema)
            return {key: self._pruned(item, properties[key]) for key, item in value.items() if key in required}
        if isinstance(value, list):
            return []
        return value

    def example(self, operation: Operation, status: int) -> Any:
        """GitHub's documented example of this answer, or None."""
        response = operation.spec["responses"].get(str(status))
        if response is None:
            return None
        content = self.resolve(response).get("content") or {}
        content_type = _json_content(content)
        if content_type is None:
            return None
        media = content[content_type]
        if "example" in media:
            return media["example"]
        examples = media.get("examples") or {}
        first = next(iter(examples.values()), None)
        return None if first is None else self.resolve(first).get("value")


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _json_content(content: Mapping[str, Any]) -> str | None:
    return next((kind for kind in content if kind == "application/json" or kind.endswith("+json")), None)


def _errors(validator: Validator, instance: Any) -> list[str]:
    """One line per failure; for oneOf/anyOf, the failure of the branch that came closest."""
    lines = []
    for error in sorted(validator.iter_errors(instance), key=lambda error: list(error.absolute_path)):
        while error.context:
            error = best_match(error.context)
        where = "/".join(map(str, error.absolute_path)) or "(root)"
        message = error.message if len(error.message) < 300 else f"{error.message[:120]} ... {error.message[-160:]}"
        lines.append(f"{where}: [{error.validator}] {message}")
    return lines


@functools.cache
def github_openapi() -> GitHubOpenAPI:
    """The description, parsed once per process."""
    path = Path(os.environ.get(SPEC_ENV) or DEFAULT_SPEC)
    if not path.is_file():
        raise SpecMissing(
            f"GitHub's OpenAPI description (@octokit/openapi@{OPENAPI_VERSION}) is not at {path}; install it "
            f"with `{INSTALL}` "
            f"(or set {SPEC_ENV} to an api.github.com.json)"
        )
    return GitHubOpenAPI(json.loads(path.read_bytes()))
