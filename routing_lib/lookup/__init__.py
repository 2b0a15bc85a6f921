"""Read-only route lookup: RocketMQ remoting (NameServer subset) and HTTP over a Delta warehouse.

routes.RouteIndex (pure, pre-encoded answers) <- topics (TopicValidator rules);
remoting (wire codec) + processor (request codes -> responses); server (asyncio TCP, FastAPI,
snapshot refresher, metrics).
"""
