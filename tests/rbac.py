"""ServiceAccount identities for RBAC tests: TokenRequest tokens, clients and kubeconfigs
(`recall_dev.identities`, which the benchmarks use too)."""

from recall_dev.identities import service_account_client, service_account_token, token_kubeconfig

__all__ = ["service_account_client", "service_account_token", "token_kubeconfig"]
