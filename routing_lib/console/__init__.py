"""The route console: a read-only web page of the fleet, its routes and their history, served
by the lookup service on its HTTP port (app.py), from the tables the job publishes."""
