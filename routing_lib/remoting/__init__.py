"""RocketMQ remoting as both network services speak it (the lookup and the collector): the
protocol's codes and versions, the frame codec, the TCP listener with its limits and TLS, the
guarded HTTP server, the services' Prometheus metrics and their start-up and shutdown."""
