"""specfleet's shared contract: the plain types, limits, status codes and worker states that the
engine, the worker service, the cluster, the client and the CLI all speak.

The bottom layer: it imports nothing else of specfleet (nor mlx, grpc or ray), so every side can
import it without importing another side's package. Imports flow one way (tests/test_layers.py):

    contract  <-  protos (wire codecs)  <-  workers / workers.service / cluster / client  <-  cli
"""
