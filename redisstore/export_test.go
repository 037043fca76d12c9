package redisstore

// FinishScriptMarks are byte strings by which a test's proxy recognises
// the Finish script on the wire: its SHA-1 (EVALSHA) or a line only its
// source has (EVAL, after NOSCRIPT).
var FinishScriptMarks = [][]byte{[]byte(finishScript.Hash()), []byte("'status', 'attempt', 'ended_by', 'revised_after', 'rerun_pending')")}
