package agentd

// LoopbackAddr exports loopbackAddr to the tests.
var LoopbackAddr = loopbackAddr
