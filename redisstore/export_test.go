package redisstore

// FinishScriptHash is the SHA-1 of the Finish script, by which a test's
// proxy recognises its EVALSHA on the wire.
var FinishScriptHash = finishScript.Hash()
