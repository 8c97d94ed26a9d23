/* Marks in the agent's log lines that the tests look for. No dependencies:
 * the end-to-end suites, which link none of the agent, include it too. */
#ifndef GPU_SERVER_MARKS_H
#define GPU_SERVER_MARKS_H

/* In the log line of an ERROR whose text did not fit the wire's
 * LT_ERROR_MSG_LEN bytes (the client got it cut): a defect of that text
 * (docs/reliability.md, "Known gaps"). */
#define GA_SERVER_CUT_MARK "refusal text cut on the wire"

#endif /* GPU_SERVER_MARKS_H */
