// Not published: an example that needs GORM, which no user of mysqlledger should get.
module github.com/idemgo/idem/mysqlledger/examples/gorm

go 1.26.8

require (
	github.com/go-sql-driver/mysql v1.10.2
	github.com/idemgo/idem v0.0.0
	github.com/idemgo/idem/mysqlledger v0.0.0
	gorm.io/driver/mysql v1.5.7
	gorm.io/gorm v1.31.2
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/google/renameio/v2 v2.0.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jinzhu/inflection v1.0.0 // indirect
	github.com/jinzhu/now v1.1.5 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.20.0 // indirect
	golang.org/x/time v0.14.0 // indirect
	modernc.org/libc v1.80.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
	modernc.org/sqlite v1.62.0 // indirect
)
