"""The rows of one sample session, by kind of event, each kind written by one collaborator:
``security`` (rule matches, decisions, asks), ``network`` (DNS, connections, HTTP),
``processes`` (audit, files, exec commands), ``models`` (model calls and their items) and
``tools`` (native and MCP tool runs). All of them share the session's ``recorder``.
"""
