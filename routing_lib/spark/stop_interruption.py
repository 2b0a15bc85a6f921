"""A stop that interrupts a micro-batch in its foreachBatch function ends the query cleanly.

`query.stop()` interrupts the stream thread. The foreachBatch function runs its Spark actions
on that thread (Py4J's client-server mode), so an action in flight fails with
java.lang.InterruptedException, which reaches Python as a Py4JJavaError and goes back to the
JVM as a Py4JException whose message is the Python traceback, the Java stack trace included
(about 7 500 characters). Spark 4.0 tells a stop's interruption from a failure by matching that
message against `Py4JJavaError: An error occurred while calling((.|\\r\\n|\\r|\\n)*)(...
InterruptedException|...)` (StreamExecution.PROXY_ERROR), a pattern Java's regex engine matches
with one level of recursion per character: on such a message it overflows the stream thread's
stack, and the query ends with "Exception in thread ... java.lang.StackOverflowError" instead
of "Stopped". So an interrupted action is re-raised with the same text minus the Java stack
trace, short enough to match.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the unit tests of the message import no Spark
    from pyspark.sql import DataFrame

# The Java exceptions Spark counts as an interruption (StreamExecution.IO_EXCEPTION_NAMES)
INTERRUPTIONS = frozenset(
    {
        "java.lang.InterruptedException",
        "java.io.InterruptedIOException",
        "java.nio.channels.ClosedByInterruptException",
    }
)
MAX_CAUSES = 10  # how deep the cause chain is searched


class BatchInterruptedError(Exception):
    """A Spark action of the batch was interrupted (the query is being stopped)."""


def interruption_of(error: BaseException) -> str | None:
    """The class name of the interruption in the Java cause chain of `error` (a
    py4j.protocol.Py4JJavaError, whose `java_exception` is the Java throwable), None if there
    is none."""
    throwable: Any = getattr(error, "java_exception", None)
    for _ in range(MAX_CAUSES):
        if throwable is None:
            return None
        name = str(throwable.getClass().getName())
        if name in INTERRUPTIONS:
            return name
        if name == "org.apache.spark.SparkException" and _cancelled_by_stop(
            str(throwable.getMessage())
        ):
            # An Arrow collect (DataFrame.toArrow, the writer's one action) is not waited for
            # on the stream thread, so the stop cancels its job instead of interrupting a
            # wait: that cancellation is the stop's interruption.
            return "java.lang.InterruptedException"
        throwable = throwable.getCause()
    return None


def _cancelled_by_stop(message: str) -> bool:
    """A job cancelled because its streaming query was stopped (Spark 4.0's message)."""
    return "[SPARK_JOB_CANCELLED]" in message and "was stopped" in message


def interruption_message(java_class: str, errmsg: str) -> str:
    """What Spark's PROXY_ERROR pattern expects: the Py4JJavaError's first line and the Java
    exception's class name."""
    return f"py4j.protocol.Py4JJavaError: {errmsg.strip()}\n: {java_class}"


def stop_interruptible(
    write: Callable[[DataFrame, int], None],
) -> Callable[[DataFrame, int], None]:
    """`write` as a foreachBatch function whose interrupted Spark actions fail with a short
    BatchInterruptedError (no context: its traceback is a few frames) and any other failure
    as it is."""

    def foreach_batch(batch: DataFrame, batch_id: int) -> None:
        try:
            write(batch, batch_id)
        except Exception as error:
            java_class = interruption_of(error)
            if java_class is None:
                raise
            message = interruption_message(java_class, str(getattr(error, "errmsg", "")))
            raise BatchInterruptedError(message) from None

    return foreach_batch
