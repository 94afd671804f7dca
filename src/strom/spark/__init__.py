"""strom for Apache Spark: the `strom` PySpark data source (batch and streaming, read and write).

    from strom.spark import register
    register(spark)
    df = spark.readStream.format("strom").option("kafka.bootstrap.servers", "127.0.0.1:9092")
    ...

Needs the optional extra `strom[spark]` (pyspark, pyarrow). Importing this package loads
neither; `register` does. See docs/spark.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NAME = "strom"


def register(spark: SparkSession) -> None:
    """Register the data source with `spark` under the name `strom`."""
    from strom.spark.source import StromDataSource

    spark.dataSource.register(StromDataSource)
