"""Read-only route lookup: RocketMQ remoting (NameServer subset) and HTTP over a Delta warehouse.

routes.RouteIndex (pure, pre-encoded answers) <- topics (TopicValidator rules);
processor (request codes -> responses); server (the FastAPI app and LookupService);
refresher (snapshot polling). The network layer it shares with the collector (frame codec,
listener, limits, TLS, start-up) is routing_lib.remoting.
"""
