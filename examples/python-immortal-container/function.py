#!/usr/bin/env python3
"""An ImmortalContainer reconcile function in Python, standard library only.

It serves the function contract of docs/function-contract.md: CloudEvents POSTed to /, health on
/health/liveness and /health/readiness. Every event is a doorbell: it names an object, and the
function reads that object from the API server and acts on what it reads, never on the body.

    KUBECONFIG=/path/to/kubeconfig PORT=8080 python3 function.py

It keeps one pod <name>-immortalpod per ImmortalContainer (recreated when deleted, replaced when
the image changes) and writes status.currentPod, startTimes and observedGeneration.
"""
import base64
import json
import os
import re
import ssl
import sys
import threading
import urllib.error
import urllib.request
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GROUP, VERSION, KIND, PLURAL = "immortalcontainer.flugel.it", "v1alpha1", "ImmortalContainer", "immortalcontainers"
API_VERSION = f"{GROUP}/{VERSION}"
# Room for the largest object the API server stores, as a Resource-mode event; larger is refused with 413.
MAX_BODY_BYTES = 3 * 1024 * 1024
APISERVER_TYPE = re.compile(r"^dev\.knative\.apiserver\.(ref|resource)\.(add|update|delete)$")
PING_TYPE = "dev.knative.sources.ping"
ATTRIBUTE_NAME = re.compile(r"^[a-z0-9]+$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
KIND_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,62}$")


class BadEvent(Exception):
    """Input that can never succeed: answered 400 with the reason, never retried."""


class ApiError(Exception):
    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status


class Kube:
    """The API server of a kubeconfig (server, CA file or data, bearer token) or of the pod's ServiceAccount."""

    def __init__(self):
        path = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
        if path:
            fields = read_kubeconfig(path)
            self.server = fields["server"]
            self.token = fields.get("token")
            context = ssl.create_default_context(cafile=fields.get("certificate-authority"))
            if "certificate-authority-data" in fields:
                context.load_verify_locations(cadata=base64.b64decode(fields["certificate-authority-data"]).decode())
        else:
            account = "/var/run/secrets/kubernetes.io/serviceaccount"
            self.server = f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}"
            with open(f"{account}/token") as token:
                self.token = token.read().strip()
            context = ssl.create_default_context(cafile=f"{account}/ca.crt")
        self.context = context

    def request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=10) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            text = error.read().decode(errors="replace")
            try:
                text = json.loads(text).get("message", text)
            except ValueError:
                pass
            raise ApiError(error.code, text) from None

    def get(self, path):
        try:
            return self.request("GET", path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise


def read_kubeconfig(path):
    """The first cluster's server and CA and the first user's token: the plain YAML kubeconfigs kubectl and this project write."""
    fields = {}
    with open(path) as kubeconfig:
        for line in kubeconfig:
            match = re.match(r"^\s*(server|certificate-authority|certificate-authority-data|token):\s*(\S+)\s*$", line)
            if match and match.group(1) not in fields:
                fields[match.group(1)] = match.group(2).strip("'\"")
    if "server" not in fields:
        raise SystemExit(f"{path}: no cluster server found")
    return fields


def object_path(namespace, name=""):
    return f"/apis/{API_VERSION}/namespaces/{namespace}/{PLURAL}" + (f"/{name}" if name else "")


def pod_path(namespace, name=""):
    return f"/api/v1/namespaces/{namespace}/pods" + (f"/{name}" if name else "")


def controlled_by(obj, owner):
    return any(ref.get("controller") and ref.get("uid") == owner["metadata"]["uid"] for ref in obj["metadata"].get("ownerReferences") or [])


def reconcile(kube, namespace, name):
    """Brings the pod and the status of ImmortalContainer namespace/name to what the API server holds."""
    owner = kube.get(object_path(namespace, name))
    if owner is None or owner["metadata"].get("deletionTimestamp"):
        return  # gone: the garbage collector removes the pod through its ownerReference
    image = owner["spec"]["image"]
    pod_name = f"{name}-immortalpod"
    pod = kube.get(pod_path(namespace, pod_name))
    problem = None
    if pod is not None and not controlled_by(pod, owner):
        problem = f"pod {pod_name} exists and is not controlled by this ImmortalContainer"
        pod = None
    elif pod is not None and pod["spec"]["containers"][0].get("image") != image:
        # The uid precondition: delete the pod judged here, not one created since.
        kube.request("DELETE", pod_path(namespace, pod_name), {"preconditions": {"uid": pod["metadata"]["uid"]}})
        pod = None
    if pod is None and problem is None:
        desired = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": namespace,
                "labels": {"controller": name},
                "ownerReferences": [
                    {"apiVersion": API_VERSION, "kind": KIND, "name": name, "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
                ],
            },
            "spec": {"containers": [{"name": "acontainer", "image": image}]},
        }
        try:
            pod = kube.request("POST", pod_path(namespace), desired)
        except ApiError as error:
            if error.status in (403, 422):
                # Refused for good (a quota, a policy, an invalid image name): shown on the object, not retried.
                problem = f"creating pod {pod_name}: {error}"
            elif error.status == 409:
                pod = kube.get(pod_path(namespace, pod_name))  # another delivery made it meanwhile
            else:
                raise
    status = dict(owner.get("status") or {})
    counted = list(status.get("countedPods") or [])
    if pod is not None and pod["metadata"]["uid"] not in counted:
        counted = (counted + [pod["metadata"]["uid"]])[-10:]
        status["startTimes"] = status.get("startTimes", 0) + 1
    status["countedPods"] = counted
    if pod is not None:
        status["currentPod"] = pod_name
    status["observedGeneration"] = owner["metadata"]["generation"]
    reason = ("PodNameTaken" if "not controlled" in problem else "FailedCreate") if problem else "PodNotRunning"
    ready = {"type": "Ready", "status": "False", "reason": reason, "message": problem or "the pod is not running yet"}
    if pod is not None and (pod.get("status") or {}).get("phase") == "Running":
        ready = {"type": "Ready", "status": "True", "reason": "PodRunning", "message": f"pod {pod_name} is running"}
    old = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if old and all(old.get(k) == ready[k] for k in ready):
        ready = old  # unchanged: keep its lastTransitionTime, so an idempotent reconcile writes nothing
    else:
        ready["lastTransitionTime"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    status["conditions"] = [ready]
    if status != (owner.get("status") or {}):
        # Conditional on the resourceVersion read: a conflict is answered 503 and retried.
        kube.request("PUT", object_path(namespace, name) + "/status", {**owner, "status": status})


def decode_event(headers, body):
    """The event's attributes and data from a binary- or structured-mode request; BadEvent when it is no valid CloudEvent."""
    content_type = headers.get("content-type", "")
    if content_type.startswith("application/cloudevents-batch"):
        raise BadEvent("batched CloudEvents are not accepted; send one event per request")
    if content_type.startswith("application/cloudevents"):
        if not re.match(r"^application/cloudevents\+json\s*(;|$)", content_type):
            raise BadEvent(f"structured content type {content_type} is not supported (application/cloudevents+json only)")
        try:
            event = json.loads(body or b"")
        except ValueError as error:
            raise BadEvent(f"structured CloudEvent is not valid JSON: {error}")
        if not isinstance(event, dict):
            raise BadEvent("structured CloudEvent must be a JSON object (one event per request)")
        for name in event:
            if name not in ("data", "data_base64") and not ATTRIBUTE_NAME.match(name):
                raise BadEvent(f"invalid attribute name: {json.dumps(name)}")
        data = event.pop("data", None)
    elif "ce-specversion" in headers:
        event = {}
        for name, value in headers.items():
            if name.startswith("ce-"):
                if not ATTRIBUTE_NAME.match(name[3:]):
                    raise BadEvent(f"invalid attribute name: {json.dumps(name[3:])}")
                event[name[3:]] = value
        data = body
        if body and re.match(r"^application/(?:[\w.-]+\+)?json\s*(;|$)", content_type, re.I):
            try:
                data = json.loads(body)
            except ValueError as error:
                raise BadEvent(f"request body is not valid JSON although the content type is {content_type}: {error}")
    else:
        raise BadEvent("not a CloudEvent: no ce-specversion header (binary mode) and content type is not application/cloudevents+json")
    for attribute in ("specversion", "id", "source", "type"):
        if not isinstance(event.get(attribute), str) or event[attribute] == "":
            raise BadEvent(f"CloudEvent has no {attribute} attribute (ce-{attribute}; required)")
    if event["specversion"] != "1.0":
        raise BadEvent(f"unsupported specversion {json.dumps(event['specversion'])}: only 1.0 is accepted")
    return event, data


def keys_for(event, data):
    """The ImmortalContainers (namespace, name) the event concerns; BadEvent when it cannot mean anything."""
    if event["type"] == PING_TYPE:
        return None  # a resync: every ImmortalContainer
    match = APISERVER_TYPE.match(event["type"])
    if not match:
        raise BadEvent(f"unknown event type {json.dumps(event['type'])[:80]}: expected dev.knative.apiserver.{{ref,resource}}.{{add,update,delete}} or {PING_TYPE}")
    if isinstance(data, bytes) and data:
        raise BadEvent(f"{event['type']} event data must be a JSON object")
    if not isinstance(data, dict):
        raise BadEvent(f"{event['type']} event data must be a JSON object" if data not in (None, b"") else f"{event['type']} event has no data")
    metadata = data.get("metadata")
    if match.group(1) == "resource":
        if not isinstance(metadata, dict):
            raise BadEvent(f"{event['type']} event data is not a Kubernetes object (no metadata)")
        references = metadata.get("ownerReferences")
        if references is not None and not (isinstance(references, list) and all(isinstance(r, dict) and all(isinstance(r.get(f), str) for f in ("apiVersion", "kind", "name", "uid")) for r in references)):
            raise BadEvent("metadata.ownerReferences must be a list of owner references")
        labels = metadata.get("labels")
        if labels is not None and not (isinstance(labels, dict) and all(isinstance(v, str) for v in labels.values())):
            raise BadEvent("metadata.labels must be a map of strings")
        name, namespace = metadata.get("name"), metadata.get("namespace", event.get("namespace"))
        kind, api_version = data.get("kind", event.get("kind")), data.get("apiVersion", event.get("apiversion"))
    else:
        name, namespace = event.get("name", data.get("name")), event.get("namespace", data.get("namespace"))
        kind, api_version = event.get("kind", data.get("kind")), event.get("apiversion", data.get("apiVersion"))
    if not isinstance(kind, str) or not KIND_NAME.match(kind) or not isinstance(api_version, str):
        raise BadEvent(f"{event['type']} event names no valid kind and apiVersion")
    group, _, version = api_version.rpartition("/")
    if not DNS_LABEL.match(version) or (group and (len(group) > 253 or not DNS_SUBDOMAIN.match(group))):
        raise BadEvent(f"{event['type']} event names an invalid apiVersion {json.dumps(api_version)[:80]}")
    if not isinstance(name, str) or len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        raise BadEvent(f"{event['type']} event names no valid object name (got {json.dumps(name)[:80]})")
    if not isinstance(namespace, str) or not DNS_LABEL.match(namespace):
        raise BadEvent(f"{event['type']} event has an invalid namespace {json.dumps(namespace)[:80]}")
    if api_version == API_VERSION and kind == KIND:
        return [(namespace, name)]
    if api_version == "v1" and kind == "Pod" and isinstance(metadata, dict):
        # A pod of ours (Resource mode): its controller. Its body only names whom to read.
        return [(namespace, r["name"]) for r in metadata.get("ownerReferences") or [] if r.get("controller") and r["kind"] == KIND and r["apiVersion"] == API_VERSION]
    if api_version == "v1" and kind == "Pod" and name.endswith("-immortalpod"):
        return [(namespace, name[: -len("-immortalpod")])]
    return []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    kube = None

    def answer(self, status, body=None):
        payload = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if payload:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):
        if self.path in ("/health/liveness", "/health/readiness"):
            return self.answer(200, {"status": "ok"})
        self.answer(404, {"error": f"no {self.path} here"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            # Read it anyway (in pieces): a sender still writing would not see an answer sent before.
            while length > 0:
                chunk = self.rfile.read(min(length, 1 << 20))
                if not chunk:
                    break
                length -= len(chunk)
            return self.answer(413, {"error": f"request body larger than {MAX_BODY_BYTES} bytes"})
        body = self.rfile.read(length)
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            event, data = decode_event(headers, body)
            keys = keys_for(event, data)
        except BadEvent as error:
            return self.answer(400, {"error": str(error)})
        try:
            if keys is None:
                items = self.kube.request("GET", f"/apis/{API_VERSION}/{PLURAL}")["items"]
                keys = [(item["metadata"]["namespace"], item["metadata"]["name"]) for item in items]
            for namespace, name in keys:
                reconcile(self.kube, namespace, name)
        except ApiError as error:
            # A conflict or an unavailable API server may pass; anything else is retried too, then dead-lettered.
            retryable = error.status in (409, 429) or error.status >= 500
            return self.answer(503 if retryable else 500, {"error": str(error)})
        except (OSError, urllib.error.URLError) as error:
            return self.answer(503, {"error": f"API server unreachable: {error}"})
        except Exception as error:  # a bug here: retried, then dead-lettered with the reason
            return self.answer(500, {"error": f"internal error: {error!r}"})
        self.answer(200)

    def log_message(self, format, *args):
        sys.stderr.write(f"{self.address_string()} {format % args}\n")


def main(handler=Handler):
    handler.kube = Kube()
    server = ThreadingHTTPServer((os.environ.get("HOST", "127.0.0.1"), int(os.environ.get("PORT", "8080"))), handler)
    print(f"listening on http://{server.server_address[0]}:{server.server_address[1]}/", flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()


if __name__ == "__main__":
    main()
