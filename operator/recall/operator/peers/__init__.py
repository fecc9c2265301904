"""The operator's peers: the other operator replicas and the workers.

`leader` elects one acting replica on a coordination.k8s.io Lease; `registry` knows the live
workers from their registration Leases. Both judge time on the operator's own clock.
"""
