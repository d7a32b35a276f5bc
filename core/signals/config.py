"""The ``[signals]`` section's models, defined in ``core.signal_settings`` (below the layers,
so that ``core.config`` does not import this package) and re-exported here for the signals."""

from core.signal_settings import (
    AwsImdsConfig,
    AzureEventsConfig,
    GcpMetadataConfig,
    NvmlConfig,
    PriceEntryConfig,
    PriceFeedConfig,
    PricesConfig,
    PriceTraceConfig,
    SignalsConfig,
)

__all__ = [
    "AwsImdsConfig",
    "AzureEventsConfig",
    "GcpMetadataConfig",
    "NvmlConfig",
    "PriceEntryConfig",
    "PriceFeedConfig",
    "PriceTraceConfig",
    "PricesConfig",
    "SignalsConfig",
]
