// Command demoserve serves one directory over HTTP on 127.0.0.1 for the
// demo: it prints the base URL on stdout and serves until killed.
package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: demoserve DIR")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("http://%s/\n", ln.Addr())
	log.Fatal(http.Serve(ln, http.FileServer(http.Dir(os.Args[1]))))
}
