"""A reference evaluation of Kubernetes NetworkPolicy ingress rules, for tests (networking.k8s.io/v1 semantics as
the API documents them): a pod selected by no policy that has `Ingress` in its policyTypes accepts everything;
one selected by some accepts a connection when a rule of one of them matches its source (a `podSelector` peer: pods
of the policy's namespace; a `namespaceSelector` peer: pods of the namespaces it selects; both: pods matching both)
and its port (no `ports`: every port; a port without number: every port of its protocol; `endPort`: a range).
`ipBlock` peers are not evaluated (pods here have no addresses). Policies are the JSON the apiserver stores
(camelCase), whether rendered by the portal or read back from the cluster.

The local cluster's fake nodes have no pod network to enforce policies with, so the cluster tests evaluate the
policies the cluster holds against the pods the cluster holds with this."""

from dataclasses import dataclass, field

from monitoring.pdb_lint import selector_matches


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    labels: dict = field(default_factory=dict)


def matches(selector: dict | None, labels: dict) -> bool:
    """A LabelSelector against labels, as the portal's own matcher evaluates it; here a missing selector is an empty
    one, which matches everything (a NetworkPolicy's `podSelector: {}`)."""
    return selector_matches(selector or {}, labels or {})


def selects(policy: dict, pod: Pod) -> bool:
    return policy["metadata"]["namespace"] == pod.namespace and matches(policy["spec"].get("podSelector"), pod.labels)


def _peer_matches(peer: dict, policy_namespace: str, source: Pod, namespaces: dict[str, dict]) -> bool:
    if "ipBlock" in peer:
        return False
    pod_selector, namespace_selector = peer.get("podSelector"), peer.get("namespaceSelector")
    if namespace_selector is None:
        in_namespace = source.namespace == policy_namespace
    else:
        in_namespace = matches(namespace_selector, namespaces.get(source.namespace, {}))
    return in_namespace and (pod_selector is None or matches(pod_selector, source.labels))


def _port_matches(ports: list | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for item in ports:
        if item.get("protocol", "TCP") != protocol:
            continue
        number = item.get("port")
        if number is None:
            return True
        end = item.get("endPort") or number
        if int(number) <= port <= int(end):
            return True
    return False


def allows_ingress(
    policies: list[dict], *, source: Pod, target: Pod, port: int, namespaces: dict[str, dict], protocol: str = "TCP"
) -> bool:
    """Whether `policies` let `source` connect to `target`'s `port`. `namespaces`: labels of each namespace."""
    selecting = [
        policy
        for policy in policies
        if selects(policy, target) and "Ingress" in (policy["spec"].get("policyTypes") or ["Ingress"])
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from")
            peer_ok = not peers or any(
                _peer_matches(peer, policy["metadata"]["namespace"], source, namespaces) for peer in peers
            )
            if peer_ok and _port_matches(rule.get("ports"), port, protocol):
                return True
    return False
