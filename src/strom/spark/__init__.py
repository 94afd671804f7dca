"""strom for Apache Spark: the `strom` PySpark data source (batch and streaming, read and write).

    from strom.spark import register
    register(spark)
    df = spark.readStream.format("strom").option("kafka.bootstrap.servers", "127.0.0.1:9092")
    ...

Needs the optional extra `strom[spark]` (pyspark, pyarrow). Importing this package loads
neither; `register` does. See docs/spark.md.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NAME = "strom"


def register(spark: SparkSession) -> None:
    """Register the data source with `spark` under the name `strom`."""
    from strom.spark.source import StromDataSource

    spark.dataSource.register(StromDataSource)


def local_session(app_name: str, master: str = "local[2]", **config: str) -> SparkSession:
    """A Spark session on this machine's loopback with the data source registered.

    Spark's Python workers run this interpreter (`PYSPARK_PYTHON`), so they import the
    same strom; the UI and console progress are off. `config` adds Spark settings
    (`spark.sql.shuffle.partitions` defaults to 2).
    """
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        **config,
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
