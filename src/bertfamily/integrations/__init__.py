"""Bridges to data engines that run bertfamily at scale: Ray Data (`integrations.ray`) and
Spark's pandas UDFs (`integrations.spark`). Each imports its engine only when used; none is a
dependency of the package."""
