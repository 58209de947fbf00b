"""Who is calling: TLS, API keys, JWTs, roles. The interceptor layers that use these live in
:mod:`service.api.interceptors` (authn, authz, limits); they are wired in server.py."""
