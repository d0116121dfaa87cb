"""The bottom layer of the apps: helpers any app may import, and which import no app.

No models: the resource-demand rules every entry point parses with (``demand``) and the hook
through which lower apps announce state changes to the dashboard above them (``live``).
"""
