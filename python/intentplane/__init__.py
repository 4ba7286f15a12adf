"""intentplane from Python: the gateway as a function an agent's tool calls.

`Gateway` starts this wheel's own `ipc serve --stdio` (the binary installed
beside this module, never another `ipc` on the PATH) and carries lines to
it: a proposal out, a decision back. It holds no policy: every decision is
the gateway's, with its receipt. The trusted side (mandates, approvals,
registry changes) stays with the `ipc` commands.

    from intentplane import Gateway

    with Gateway("bundle.json", "world.toml", store="gateway.db",
                 mandate="mandate.json") as gw:
        d = gw.decide("payment.transfer", {"payee_iban": "DE44...", ...})
        if d.decision == "ALLOW":
            ...
"""

from ._find import find_ipc
from ._gateway import (
    Decision,
    Gateway,
    GatewayError,
    Receipt,
)

__all__ = ["Decision", "Gateway", "GatewayError", "Receipt", "find_ipc"]
