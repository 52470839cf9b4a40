"""Few-shot examples of the ``k8s`` app: (situation, next reply) pairs, written by us.

They show the reply format (one kubectl command in a fence, a here-document for manifests)
on situations that are not generated queries (other services, other ports).
"""

from __future__ import annotations

EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "Connectivity report before your first step (1 mismatch):\n"
        "frontend -> adservice:9555/TCP (expected allowed, measured blocked)",
        "```\nkubectl get networkpolicy adservice -o yaml\n```",
    ),
    (
        "The policy adservice admits only pods with app=frontend on port 9555/UDP, and the "
        "report says frontend -> adservice:9555/TCP is blocked although it should be allowed.",
        "```\nkubectl patch networkpolicy adservice --type=json "
        "-p='[{\"op\": \"replace\", \"path\": \"/spec/ingress/0/ports/0/protocol\", "
        "\"value\": \"TCP\"}]'\n```",
    ),
    (
        "The report says emailservice -> shippingservice:50051/TCP is allowed although it "
        "should be blocked; the policy shippingservice has an ingress rule from "
        "app=emailservice that no intended caller needs.",
        "```\nkubectl apply -f - <<EOF\napiVersion: networking.k8s.io/v1\n"
        "kind: NetworkPolicy\nmetadata:\n  name: shippingservice\nspec:\n  podSelector:\n"
        "    matchLabels:\n      app: shippingservice\n  policyTypes: [Ingress, Egress]\n"
        "  ingress:\n  - from:\n    - podSelector:\n        matchLabels:\n"
        "          app: frontend\n    ports:\n    - port: 50051\n      protocol: TCP\n"
        "  - from:\n    - podSelector:\n        matchLabels:\n          app: checkoutservice\n"
        "    ports:\n    - port: 50051\n      protocol: TCP\n  egress:\n  - {}\nEOF\n```",
    ),
    (
        "Connectivity report after step 3:\nNo mismatches: the measured connectivity equals "
        "the intended one.",
        "done",
    ),
)
