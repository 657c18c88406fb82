#!/usr/bin/env python3
"""A deliberately broken ImmortalContainer function: what the contract kit must catch.

It trusts the event body (the image and the status it carries, not the API server's object) and
answers 200 to everything, malformed or not. `opfn conformance` fails it with the reason for each
mistake (docs/function-contract.md). Never write a function like this.

    KUBECONFIG=/path/to/kubeconfig PORT=8081 python3 broken.py
"""
import json

from function import API_VERSION, KIND, ApiError, Handler, main, object_path, pod_path


class TrustingHandler(Handler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            obj = json.loads(body)
            if obj.get("apiVersion") == API_VERSION and obj.get("kind") == KIND and "delete" not in self.headers.get("ce-type", ""):
                self.act_on_body(obj)
        except (ValueError, AttributeError, KeyError, TypeError, ApiError):
            pass
        self.answer(200)

    def act_on_body(self, obj):
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        pod_name = f"{name}-immortalpod"
        pod = self.kube.get(pod_path(namespace, pod_name))
        if pod is not None and pod["spec"]["containers"][0]["image"] != obj["spec"]["image"]:
            self.kube.request("DELETE", pod_path(namespace, pod_name))
            pod = None
        if pod is None:
            owner = {"apiVersion": API_VERSION, "kind": KIND, "name": name, "uid": obj["metadata"]["uid"], "controller": True}
            self.kube.request(
                "POST",
                pod_path(namespace),
                {
                    "metadata": {"name": pod_name, "namespace": namespace, "ownerReferences": [owner]},
                    "spec": {"containers": [{"name": "acontainer", "image": obj["spec"]["image"]}]},
                },
            )
        # Counts every delivery, from the body's status: duplicates and stale bodies show.
        status = dict(obj.get("status") or {})
        status.update(currentPod=pod_name, startTimes=status.get("startTimes", 0) + 1, observedGeneration=obj["metadata"].get("generation"))
        current = self.kube.get(object_path(namespace, name))
        if current is not None:
            self.kube.request("PUT", object_path(namespace, name) + "/status", {**current, "status": status})


if __name__ == "__main__":
    main(TrustingHandler)
