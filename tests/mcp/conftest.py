from tests.service.conftest import need_criu, service, settings  # noqa: F401
