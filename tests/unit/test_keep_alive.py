"""serve's kept-alive connections outlast the load balancer's idle timeout: AWS asks this of
an ALB's targets, since a target closing first races the balancer's next request (a 502)."""

from __future__ import annotations

from pathlib import Path

from lambdaserve.local.template import load_template
from lambdaserve.processes.serve import uvicorn_options

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"


def test_serve_keeps_an_idle_connection_longer_than_the_load_balancer_does():
    # Given the load balancer template.yaml deploys in front of serve
    balancer = load_template(TEMPLATE)["Resources"]["ServerModeLoadBalancer"]
    attributes = balancer["Properties"]["LoadBalancerAttributes"]
    [idle] = [int(a["Value"]) for a in attributes if a["Key"] == "idle_timeout.timeout_seconds"]
    # When serve's uvicorn is configured
    options = uvicorn_options("0.0.0.0", 8080)
    # Then an idle connection stays open past the balancer's idle timeout
    assert options["timeout_keep_alive"] > idle
